'use strict';
// Failures: at import (import_error, status 1), in the handler (error result, status 0), and
// while idle (status 4).

const assert = require('node:assert');
const { test } = require('node:test');
const { Worker, invoke } = require('../testdata/harness');

/** Start a worker that must fail to load; return its import_error's error and exit. */
async function importError(fixture, spec) {
  const worker = new Worker(fixture, spec);
  const msg = await worker.next();
  assert.strictEqual(msg.type, 'import_error', JSON.stringify(msg));
  assert.deepStrictEqual(Object.keys(msg.error).sort(), ['message', 'traceback', 'type']);
  assert.deepStrictEqual(await worker.exit(), { code: 1, signal: null });
  return msg.error;
}

test('an exception at import is an import_error with its stack, status 1', async () => {
  const err = await importError('import_error_cjs', 'main.js:handler');
  assert.strictEqual(err.type, 'Error');
  assert.strictEqual(err.message, 'cannot reach the database at import');
  assert.match(err.traceback, /^Error: cannot reach the database at import\n/);
  assert.match(err.traceback, /at connect \(.*import_error_cjs\/main\.js:3:9\)/);
  assert.doesNotMatch(err.traceback, /zygo_worker\.js|loader\.js/, 'agent frames left out');
});

test('syntax errors name the file and line, CommonJS and ES module', async () => {
  const cjs = await importError('import_error_cjs', 'syntax.js:handler');
  assert.strictEqual(cjs.type, 'SyntaxError');
  assert.match(cjs.traceback, /import_error_cjs\/syntax\.js:2\n/);
  const esm = await importError('import_error_esm', 'syntax.mjs:handler');
  assert.strictEqual(esm.type, 'SyntaxError');
  assert.match(esm.traceback, /import_error_esm\/syntax\.mjs:2\nexport const broken = \(;/);
});

test('a missing or non-function export, or a bad spec, is a TypeError import_error', async () => {
  const missing = await importError('esm_type_module', 'main.js:nope');
  assert.strictEqual(missing.type, 'TypeError');
  assert.match(missing.message, /has no export "nope" \(its exports: handler, notAFunction\)/);
  const notFn = await importError('esm_type_module', 'main.js:notAFunction');
  assert.match(notFn.message, /exports a number, not a function/);
  const outside = await importError('quiet', '../cjs/main.js:handler');
  assert.match(outside.message, /is not inside/);
  const noFile = await importError('quiet', 'absent.js:handler');
  assert.strictEqual(noFile.type, 'Error');
  assert.match(noFile.traceback, /MODULE_NOT_FOUND/);
});

test('process.exit, a rejected or never-settling top-level await at import', async () => {
  const exit = await importError('import_error_cjs', 'exit.js:handler');
  assert.deepStrictEqual(exit, { type: 'ProcessExitError',
    message: 'process.exit(7) was called while loading the handler', traceback: '' });
  const rejects = await importError('import_error_esm', 'rejects.mjs:handler');
  assert.strictEqual(rejects.type, 'TypeError');
  assert.strictEqual(rejects.message, 'config missing');
  const tla = await importError('import_error_esm', 'tla.mjs:handler');
  assert.strictEqual(tla.type, 'UnsettledTopLevelAwaitError');
});

/** Invoke export `name` of the handlers fixture; assert status 0 and return result.json. */
async function outcome(name, event = {}) {
  const run = await invoke('handlers', `main.js:${name}`, event);
  assert.deepStrictEqual(run.exit, { code: 0, signal: null }, run.worker.err);
  assert.ok(run.result, `no result.json; worker stderr: ${run.worker.err}`);
  return run.result;
}

test('a handler exception is an error result with type, message and stack', async () => {
  const { ok, error } = await outcome('throwsSync');
  assert.strictEqual(ok, false);
  assert.strictEqual(error.type, 'QuotaError', 'a subclass that kept name "Error" is named by its class');
  assert.strictEqual(error.message, 'over quota');
  assert.match(error.traceback, /^QuotaError: over quota\n +at exports\.throwsSync \(.*handlers\/main\.js:5:9\)/);
  assert.doesNotMatch(error.traceback, /zygo_worker\.js|onStreamRead/, 'no agent frames');
});

test('async handlers: a value, a rejection', async () => {
  assert.deepStrictEqual(await outcome('sync', { a: 1, b: 2 }), { ok: true, value: { sum: 3 } });
  const { error } = await outcome('rejects');
  assert.deepStrictEqual([error.type, error.message], ['TypeError', 'bad input']);
  assert.match(error.traceback, /at exports\.rejects/);
});

test('a throw in a timer and an unhandled rejection during the request are error results', async () => {
  const timer = await outcome('throwsInTimer');
  assert.strictEqual(timer.ok, false);
  assert.deepStrictEqual([timer.error.type, timer.error.message], ['RangeError', 'thrown from a timer']);
  assert.match(timer.error.traceback, /Timeout\._onTimeout .*handlers\/main\.js:12/);
  const rejection = await outcome('unhandledRejection');
  assert.deepStrictEqual([rejection.error.type, rejection.error.message],
    ['SyntaxError', 'nobody catches me']);
});

test('a thrown non-Error value is described by its type', async () => {
  assert.deepStrictEqual((await outcome('throwsString')).error,
    { type: 'string', message: 'plain string', traceback: '' });
});

test('values JSON cannot hold are TypeError results; undefined is null', async () => {
  for (const [name, pattern] of [['bigint', /BigInt/], ['circular', /circular structure/],
    ['fn', /returned a function/]]) {
    const { ok, error } = await outcome(name);
    assert.strictEqual(ok, false, name);
    assert.strictEqual(error.type, 'TypeError', name);
    assert.match(error.message, /^handler result is not JSON-serialisable: /, name);
    assert.match(error.message, pattern, name);
  }
  assert.deepStrictEqual(await outcome('undef'), { ok: true, value: null });
  assert.deepStrictEqual(await outcome('nan'), { ok: true, value: { x: null } });
  assert.deepStrictEqual(await outcome('unicode'), { ok: true, value: { s: 'žluťoučký 🐴' } });
});

test('process.exit in the handler and a promise that never settles are error results', async () => {
  assert.deepStrictEqual((await outcome('exits')).error, { type: 'ProcessExitError',
    message: 'the handler called process.exit(3) before returning', traceback: '' });
  assert.strictEqual((await outcome('pending')).error.type, 'UnsettledPromiseError');
});

test('an exception thrown by import-time code while idle ends the worker with status 4', async () => {
  const worker = new Worker('import_error_cjs', 'later.js:handler');
  assert.strictEqual((await worker.next()).type, 'ready');
  assert.deepStrictEqual(await worker.exit(), { code: 4, signal: null });
  assert.match(worker.err, /uncaught exception while waiting for go: RangeError: timer set at import failed/);
});
