'use strict';
// Helpers for code running inside a Zygo sandbox (Node standard library only).
//
// Every copy of a sandbox -- a fork child or a rollback -- gets a new random generation at
// /run/zygo/generation (32 hex digits) and its identity in /run/zygo/identity.json before Zygo
// hands it out. A process that was running at the checkpoint wakes up in every copy with the
// same memory. onNewGeneration(cb) calls cb(generation, identity) once in each new copy.
//
//   const zygo = require('/path/to/zygo-sandbox');
//   let rng = myPrng(zygo.randomBytes(16));
//   zygo.onNewGeneration(() => { rng = myPrng(zygo.randomBytes(16)); });
//   function handle(req) { zygo.check(); ... }   // pending callbacks are done first
//
// Latency: the watcher listens to fs.watch (inotify) on /run/zygo and polls every intervalMs
// (default 100 ms) in any case, so callbacks run within about intervalMs of the new generation
// being published, whenever the event loop is free; check() runs them at once.
//
// What it cannot refresh: V8's Math.random and Node's crypto module (OpenSSL's generator and
// randomUUID's cache live inside this process and have no reseed call). Draw anything secret
// from randomBytes() here, which reads the kernel, or run the process as a service with
// on_fork = "restart".

const fs = require('fs');
const path = require('path');

function runDir() {
  return process.env.ZYGO_RUN_DIR || '/run/zygo';
}

// current returns the current generation, or null outside a sandbox.
function current() {
  try {
    return fs.readFileSync(path.join(runDir(), 'generation'), 'utf8').trim() || null;
  } catch {
    return null;
  }
}

// identity returns the copy's identity.json as an object ({} when missing).
function identity() {
  try {
    return JSON.parse(fs.readFileSync(path.join(runDir(), 'identity.json'), 'utf8'));
  } catch {
    return {};
  }
}

// randomBytes returns n bytes read from /dev/urandom: the kernel's generator, which differs
// in every copy, unlike crypto.randomBytes inside a process that predates the copy.
function randomBytes(n) {
  const b = Buffer.alloc(n);
  const fd = fs.openSync('/dev/urandom', 'r');
  try {
    for (let off = 0; off < n;) off += fs.readSync(fd, b, off, n - off, null);
  } finally {
    fs.closeSync(fd);
  }
  return b;
}

// Watcher runs callbacks once for every new generation it observes. The generation seen when
// it is made is the baseline. Callbacks run in order; one that throws is reported on stderr
// and does not stop the others.
class Watcher {
  constructor({ intervalMs = 100 } = {}) {
    this.intervalMs = intervalMs;
    this.seen = current();
    this.callbacks = [];
    this.timer = null;
    this.fsw = null;
  }

  add(cb) {
    this.callbacks.push(cb);
    return cb;
  }

  // check runs the callbacks now if the generation changed; returns true if it did.
  check() {
    const gen = current();
    if (gen === null || gen === this.seen) return false;
    this.seen = gen;
    const ident = identity();
    for (const cb of this.callbacks.slice()) {
      try {
        cb(gen, ident);
      } catch (err) {
        process.stderr.write(`zygo-sandbox: generation callback failed: ${err && err.stack || err}\n`);
      }
    }
    return true;
  }

  // start begins watching; the timer and the fs watch do not keep the process alive.
  start() {
    if (this.timer) return this;
    this.timer = setInterval(() => this.check(), this.intervalMs);
    this.timer.unref();
    try {
      this.fsw = fs.watch(runDir(), { persistent: false }, () => this.check());
      this.fsw.on('error', () => { this.fsw.close(); this.fsw = null; });
    } catch {
      this.fsw = null; // no inotify here (or no /run/zygo yet): polling alone
    }
    return this;
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
    if (this.fsw) this.fsw.close();
    this.fsw = null;
  }
}

let shared = null;

// defaultWatcher returns the process's shared Watcher, made on first use.
function defaultWatcher(opts) {
  if (!shared) shared = new Watcher(opts);
  return shared;
}

// onNewGeneration calls cb(generation, identity) once in every new copy of this sandbox.
// Call it before the checkpoint is taken: the generation current then is the baseline.
function onNewGeneration(cb, opts) {
  const w = defaultWatcher(opts);
  w.add(cb);
  w.start();
  return cb;
}

// check runs the shared watcher's pending callbacks now; true if the generation changed.
function check() {
  return defaultWatcher().check();
}

module.exports = { Watcher, check, current, defaultWatcher, identity, onNewGeneration, randomBytes };
