'use strict';
// Unit tests of zygo-sandbox on this host, with a temporary directory standing in for
// /run/zygo. The test inside a real sandbox (checkpoint, fork, rollback) is
// internal/sandbox/gvisor/watchers_test.go.
//
//   cd sdk/node/zygo-sandbox && node --test test/

const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');

function publish(dir, gen) {
  for (const [name, data] of [['identity.json', JSON.stringify({ generation: gen })], ['generation', gen]]) {
    const tmp = path.join(dir, `.${name}.tmp`);
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, path.join(dir, name));
  }
}

function setup(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zygo-run-'));
  process.env.ZYGO_RUN_DIR = dir;
  t.after(() => {
    delete process.env.ZYGO_RUN_DIR;
    fs.rmSync(dir, { recursive: true, force: true });
  });
  publish(dir, 'a'.repeat(32));
  return dir;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(cond, ms = 2000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (cond()) return true;
    await sleep(10);
  }
  return cond();
}

const zygo = require('..');

test('baseline, then one callback per generation with its identity', async (t) => {
  const dir = setup(t);
  const calls = [];
  const w = new zygo.Watcher({ intervalMs: 50 });
  w.add((gen, ident) => calls.push([gen, ident.generation]));
  w.start();
  t.after(() => w.stop());
  await sleep(200);
  assert.deepStrictEqual(calls, [], 'the baseline generation must not call back');
  publish(dir, 'b'.repeat(32));
  assert.ok(await waitFor(() => calls.length === 1), 'no callback for a new generation');
  await sleep(300);
  assert.deepStrictEqual(calls, [['b'.repeat(32), 'b'.repeat(32)]]);
  publish(dir, 'c'.repeat(32));
  assert.ok(await waitFor(() => calls.length === 2));
});

test('check runs pending callbacks synchronously, once', (t) => {
  const dir = setup(t);
  const calls = [];
  const w = new zygo.Watcher({ intervalMs: 60000 });
  w.add((gen) => calls.push(gen));
  assert.strictEqual(w.check(), false);
  publish(dir, 'd'.repeat(32));
  assert.strictEqual(w.check(), true);
  assert.strictEqual(w.check(), false);
  assert.deepStrictEqual(calls, ['d'.repeat(32)]);
});

test('a throwing callback does not stop the others', (t) => {
  const dir = setup(t);
  const calls = [];
  const w = new zygo.Watcher();
  w.add(() => { throw new Error('boom'); });
  w.add((gen) => calls.push(gen));
  publish(dir, 'e'.repeat(32));
  const write = process.stderr.write;
  process.stderr.write = () => true;
  try {
    w.check();
  } finally {
    process.stderr.write = write;
  }
  assert.deepStrictEqual(calls, ['e'.repeat(32)]);
});

test('outside a sandbox', (t) => {
  const dir = setup(t);
  process.env.ZYGO_RUN_DIR = path.join(dir, 'missing');
  assert.strictEqual(zygo.current(), null);
  assert.deepStrictEqual(zygo.identity(), {});
  assert.strictEqual(new zygo.Watcher().check(), false);
  const w = new zygo.Watcher().start(); // no directory to watch: polling alone, no throw
  w.stop();
});

test('randomBytes reads the kernel', () => {
  const a = zygo.randomBytes(16);
  const b = zygo.randomBytes(16);
  assert.strictEqual(a.length, 16);
  assert.notDeepStrictEqual(a, b);
});
