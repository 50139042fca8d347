'use strict';
// A fake supervisor for the worker tests, written apart from the agent's wire.js so that the
// two do not share mistakes. It starts the real zygo_worker.js with a unix stream socket at
// fd 3 (child_process makes a socketpair for a 'pipe' entry at index 3), reads its NDJSON
// messages, sends `go`, and plays the request directory with a temporary directory.
// Timeouts here only detect hangs; none of them is a timing target.

const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

const WORKER = path.join(__dirname, '..', 'zygo_worker.js');
const FIXTURES = path.join(__dirname, 'fixtures');
const HANG_MS = 15000;

/** One running worker: its messages on fd 3, its own stdout/stderr, its exit. */
class Worker {
  /** Start the worker for test/fixtures/<fixture> with handler `spec`. */
  constructor(fixture, spec, extraArgs = []) {
    this.code = path.join(FIXTURES, fixture);
    this.proc = spawn(process.execPath,
      [WORKER, '--code', this.code, '--handler', spec, ...extraArgs],
      { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    this.pid = this.proc.pid;
    this.out = '';
    this.err = '';
    this.proc.stdout.on('data', (d) => { this.out += d; });
    this.proc.stderr.on('data', (d) => { this.err += d; });
    this.control = this.proc.stdio[3];
    this.messages = [];
    this.waiting = [];
    this.controlEnded = new Promise((resolve) => this.control.on('end', resolve));
    let buf = '';
    this.control.setEncoding('utf8');
    this.control.on('data', (chunk) => {
      buf += chunk;
      for (let nl; (nl = buf.indexOf('\n')) !== -1;) {
        this.messages.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
        this.waiting.splice(0).forEach((wake) => wake());
      }
    });
    this.control.on('error', () => {});
    // 'close' comes after the exit and after every stdio stream (fd 3 included) is drained.
    this.gone = false;
    this.exited = new Promise((resolve) => {
      this.proc.on('close', (code, signal) => {
        this.gone = true;
        this.waiting.splice(0).forEach((wake) => wake());
        resolve({ code, signal });
      });
    });
  }

  /** Resolve to the next message; reject if the worker exits first or after HANG_MS. */
  async next() {
    const deadline = Date.now() + HANG_MS;
    while (this.messages.length === 0) {
      if (this.gone) throw new Error(`worker exited without a message; stderr: ${this.err}`);
      if (Date.now() > deadline) throw new Error('no message from the worker in time');
      await new Promise((resolve) => {
        this.waiting.push(resolve);
        setTimeout(resolve, 100);
      });
    }
    return this.messages.shift();
  }

  /** Write one NDJSON line on the control socket. */
  send(msg) {
    this.control.write(JSON.stringify(msg) + '\n');
  }

  /** Resolve to {code, signal}; kill the worker and reject after HANG_MS. */
  async exit() {
    let timer;
    const hang = new Promise((_, reject) => {
      timer = setTimeout(() => {
        this.proc.kill('SIGKILL');
        reject(new Error(`worker did not exit in time; stderr: ${this.err}`));
      }, HANG_MS);
    });
    try {
      return await Promise.race([this.exited, hang]);
    } finally {
      clearTimeout(timer);
    }
  }
}

// Request directories made by this test process, removed when it exits (the supervisor's job).
const made = [];
process.on('exit', () => made.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true })));

/** Return a fresh request directory holding tmp/ and event.json (removed at exit). */
function requestDir(event) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zygo-node-req-'));
  made.push(dir);
  fs.mkdirSync(path.join(dir, 'tmp'), { mode: 0o700 });
  fs.writeFileSync(path.join(dir, 'event.json'), JSON.stringify(event));
  return dir;
}

/** Return the go message for `dir`. */
function goFor(dir, extra = {}) {
  return { type: 'go', request_id: 'r-test', dir, deadline_ms: 30000, function: 'fixture',
    version: 'sha256:test', ...extra };
}

/**
 * Start a worker, expect `ready`, send go for a new request directory and wait for the exit.
 * Returns {ready, exit, result (parsed result.json or null, without "steps"), steps (the
 * worker's timing of its steps, or null), stdout, stderr (the request's files, "" if
 * absent), worker (the Worker), dir}.
 */
async function invoke(fixture, spec, event = {}, goExtra = {}) {
  const worker = new Worker(fixture, spec);
  const ready = await worker.next();
  assert.strictEqual(ready.type, 'ready', `expected ready, got ${JSON.stringify(ready)}`);
  const dir = requestDir(event);
  worker.send(goFor(dir, goExtra));
  const exit = await worker.exit();
  const steps = (readJSON(path.join(dir, 'result.json')) || {}).steps || null;
  return { ready, exit, dir, worker, result: readResult(dir), steps,
    stdout: readText(path.join(dir, 'stdout')), stderr: readText(path.join(dir, 'stderr')) };
}

function readJSON(file) {
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null;
}

/** dir/result.json parsed, without the worker's timing ("steps"), or null when absent. */
function readResult(dir) {
  const result = readJSON(path.join(dir, 'result.json'));
  if (result !== null) delete result.steps;
  return result;
}

function readText(file) {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
}

module.exports = { Worker, requestDir, goFor, invoke, readResult, FIXTURES };
