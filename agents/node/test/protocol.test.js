'use strict';
// The worker protocol end to end: the real zygo_worker.js driven by the fake supervisor.

const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');
const { Worker, requestDir, goFor, invoke, readResult } = require('../testdata/harness');

test('ready carries pid, node, openssl and the checks', async () => {
  const worker = new Worker('quiet', 'main.js:handler');
  const ready = await worker.next();
  assert.deepStrictEqual(Object.keys(ready).sort(), ['checks', 'node', 'openssl', 'pid', 'type']);
  assert.strictEqual(ready.type, 'ready');
  assert.strictEqual(ready.pid, worker.pid);
  assert.strictEqual(ready.node, process.version);
  assert.strictEqual(ready.openssl, process.versions.openssl);
  assert.deepStrictEqual(ready.checks.map((c) => c.name), ['handles', 'libcrypto']);
  for (const check of ready.checks) {
    assert.ok(['info', 'warn'].includes(check.level), JSON.stringify(check));
    assert.strictEqual(typeof check.detail, 'string');
  }
  assert.strictEqual(ready.checks[0].level, 'info');
  assert.deepStrictEqual(ready.checks[0].items, []);
  worker.control.end();
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
});

test('a CommonJS handler gets the event and the context; result.json holds its value', async () => {
  const before = Date.now();
  const run = await invoke('cjs', 'main.js:handler', { x: [1, 'two'] }, { deadline_ms: 5000 });
  assert.deepStrictEqual(run.exit, { code: 0, signal: null });
  assert.strictEqual(run.result.ok, true);
  const { value } = run.result;
  assert.deepStrictEqual(value.event, { x: [1, 'two'] });
  const ctx = value.context;
  assert.strictEqual(ctx.requestId, 'r-test');
  assert.strictEqual(ctx.request_id, 'r-test');
  assert.strictEqual(ctx.functionName, 'fixture');
  assert.strictEqual(ctx.function, 'fixture');
  assert.strictEqual(ctx.version, 'sha256:test');
  assert.ok(ctx.deadline >= before + 5000 && ctx.deadline <= Date.now() + 5000, String(ctx.deadline));
  assert.ok(ctx.remaining > 0 && ctx.remaining <= 5000, String(ctx.remaining));
  assert.strictEqual(value.pid, run.ready.pid, 'the worker that imported serves the request');
  assert.ok(!fs.existsSync(path.join(run.dir, '.result.json.tmp')), 'temporary name renamed');
});

test('result.json carries the worker\'s timing of its steps after go, in order', async () => {
  const run = await invoke('cjs', 'main.js:handler', { x: 1 });
  assert.strictEqual(run.result.ok, true);
  const names = run.steps.map(([name]) => name);
  assert.deepStrictEqual(names, ['close_socket', 'stdio', 'tmpdir', 'event', 'handler', 'encode']);
  for (const [, ns] of run.steps) assert.ok(Number.isSafeInteger(ns) && ns >= 0, String(ns));
});

test('ES modules: .mjs, .js under "type": "module", and a default object', async () => {
  const mjs = await invoke('esm_mjs', 'main.mjs:handler', { x: 7 });
  assert.deepStrictEqual(mjs.result, { ok: true, value: { kind: 'mjs', got: 7, requestId: 'r-test' } });
  const typed = await invoke('esm_type_module', 'main.js:handler', { x: 8 });
  assert.strictEqual(typed.result.ok, true, JSON.stringify(typed.result));
  assert.strictEqual(typed.result.value.kind, 'type-module');
  assert.match(typed.result.value.where, /^file:\/\/.*esm_type_module\/main\.js$/);
  const viaDefault = await invoke('esm_mjs', 'main.mjs:fromDefault');
  assert.deepStrictEqual(viaDefault.result, { ok: true, value: 'default object' });
  const cjsDefault = await invoke('cjs', 'main.js:viaDefault');
  assert.deepStrictEqual(cjsDefault.result, { ok: true, value: { self: 'holder' } },
    'found on module.exports.default and called with it as this');
});

test('stdout and stderr go to the request files, console, import-time references, fds 1 and 2 and inherited stdio included', async () => {
  const run = await invoke('cjs', 'main.js:handler');
  const out = run.stdout.split('\n');
  for (const line of ['out: console.log', 'out: process.stdout.write',
    'out: console.log captured at import', 'out: stream captured at import',
    'out: fd 1 directly', 'out: inherited by a child']) {
    assert.ok(out.includes(line), `${line} missing from ${JSON.stringify(run.stdout)}`);
  }
  assert.strictEqual(run.stderr, 'err: console.error\nerr: buffer\nerr: fd 2 directly\n');
  assert.strictEqual(run.worker.out, '', 'nothing reached the worker\'s own stdout');
  assert.strictEqual(run.worker.err, '', 'nothing reached the worker\'s own stderr');
  assert.strictEqual(fs.statSync(path.join(run.dir, 'stdout')).mode & 0o777, 0o600);
});

test('stdout and stderr made on first use in the handler go to the request files', async () => {
  const run = await invoke('handlers', 'main.js:printsFirst');
  assert.deepStrictEqual(run.result, { ok: true, value: { stdoutFd: 1, stderrFd: 2 } });
  assert.strictEqual(run.stdout, 'out: console.log\nout: process.stdout.write\n');
  assert.strictEqual(run.stderr, 'err: console.error\nerr: buffer\n');
  assert.strictEqual(run.worker.out, '', 'nothing reached the worker\'s own stdout');
  assert.strictEqual(run.worker.err, '', 'nothing reached the worker\'s own stderr');
});

test('TMPDIR and os.tmpdir() are the request\'s private tmp/', async () => {
  const run = await invoke('cjs', 'main.js:handler');
  const tmp = path.join(run.dir, 'tmp');
  assert.strictEqual(run.result.value.tmpdir, tmp);
  assert.strictEqual(run.result.value.envTmpdir, tmp);
  assert.strictEqual(path.dirname(run.result.value.scratch), tmp);
  assert.strictEqual(fs.readFileSync(path.join(run.result.value.scratch, 'f'), 'utf8'), 'x');
});

test('no socket at fd 3 (nor anywhere above 2) once the handler runs', async () => {
  const run = await invoke('cjs', 'main.js:handler');
  const { fds, fd3Write, childFdsAtImport, childFdsNow } = run.result.value;
  const sockets = fds.filter((f) => f.fd > 2 && /^socket:/.test(f.target || ''));
  assert.deepStrictEqual(sockets, [], JSON.stringify(fds));
  const fd3 = fds.find((f) => f.fd === 3);
  assert.ok(!fd3 || !/^socket:/.test(fd3.target || ''), `fd 3 is ${JSON.stringify(fd3)}`);
  // A forged line written to fd 3 fails (fd 3 is closed) or lands in whatever file now has
  // that number, never on the supervisor's socket: only ready came on it.
  assert.ok(['ok', 'EBADF'].includes(fd3Write), fd3Write);
  assert.deepStrictEqual(run.worker.messages, []);
  // Processes spawned at import or by the handler did not inherit the control socket.
  for (const listing of [childFdsAtImport, childFdsNow]) {
    const inherited = listing.split('\n').filter((l) => / ([3-9]|\d\d+) -> socket:/.test(l));
    assert.deepStrictEqual(inherited, [], listing);
  }
});

test('the supervisor sees end of stream on fd 3 while the handler still runs', async () => {
  const worker = new Worker('handlers', 'main.js:waitForRelease');
  await worker.next();
  const dir = requestDir({});
  worker.send(goFor(dir));
  await worker.controlEnded; // would hang if the worker kept fd 3 open during the handler
  let fd3 = null;
  try {
    fd3 = fs.readlinkSync(`/proc/${worker.pid}/fd/3`);
  } catch (err) {
    assert.strictEqual(err.code, 'ENOENT');
  }
  assert.ok(fd3 === null || !fd3.startsWith('socket:'), `fd 3 is ${fd3}`);
  fs.writeFileSync(path.join(dir, 'tmp', 'release'), '');
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
  assert.deepStrictEqual(readResult(dir),
    { ok: true, value: 'released' });
});

test('unknown messages are ignored; only go starts the request', async () => {
  const worker = new Worker('handlers', 'main.js:sync');
  await worker.next();
  worker.send({ type: 'stop-please' });
  worker.control.write('not json\n');
  worker.control.write('[1,2]\n');
  worker.control.write('x'.repeat(70 * 1024) + '\n');
  const dir = requestDir({ a: 2, b: 3 });
  worker.send(goFor(dir));
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
  assert.deepStrictEqual(readResult(dir),
    { ok: true, value: { sum: 5 } });
  assert.match(worker.err, /unknown type "stop-please"/);
  assert.match(worker.err, /not JSON/);
  assert.match(worker.err, /over 64 KiB/);
});

test('warm before go is read and ignored without a word', async () => {
  const worker = new Worker('handlers', 'main.js:sync');
  await worker.next();
  worker.send({ type: 'warm' });
  const dir = requestDir({ a: 1, b: 1 });
  worker.send(goFor(dir));
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
  assert.deepStrictEqual(readResult(dir), { ok: true, value: { sum: 2 } });
  assert.strictEqual(worker.err, '');
});

test('the control socket closing before go ends the worker with status 0', async () => {
  const worker = new Worker('cjs', 'main.js:handler');
  await worker.next();
  worker.control.end();
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
});

test('a malformed go ends the worker with status 2 and no result', async () => {
  const worker = new Worker('handlers', 'main.js:sync');
  await worker.next();
  const dir = requestDir({});
  worker.send(goFor(dir, { deadline_ms: '30s' }));
  assert.deepStrictEqual(await worker.exit(), { code: 2, signal: null });
  assert.match(worker.err, /deadline_ms must be a non-negative integer/);
  assert.ok(!fs.existsSync(path.join(dir, 'result.json')));
});

test('an event.json JSON.parse refuses is a rejected event: no handler, status 0', async () => {
  const worker = new Worker('handlers', 'main.js:sync');
  await worker.next();
  const dir = requestDir({});
  fs.writeFileSync(path.join(dir, 'event.json'), '{not json');
  worker.send(goFor(dir));
  assert.deepStrictEqual(await worker.exit(), { code: 0, signal: null });
  const result = readResult(dir);
  assert.strictEqual(result.ok, false);
  assert.strictEqual(result.rejected, 'event');
  assert.strictEqual(result.error.type, 'EventRejected');
  assert.match(result.error.message, /^event: Node's JSON parser refused it: SyntaxError/);
});

test('an unreadable event.json gives a ZygoAgentError result and status 3', async () => {
  const worker = new Worker('handlers', 'main.js:sync');
  await worker.next();
  const dir = requestDir({});
  fs.rmSync(path.join(dir, 'event.json'));
  fs.mkdirSync(path.join(dir, 'event.json'));
  worker.send(goFor(dir));
  assert.deepStrictEqual(await worker.exit(), { code: 3, signal: null });
  const result = readResult(dir);
  assert.strictEqual(result.ok, false);
  assert.strictEqual(result.error.type, 'ZygoAgentError');
  assert.match(result.error.message, /^reading event\.json: Error/);
});

test('usage errors exit with status 2', async () => {
  const worker = new Worker('quiet', 'main.js:handler', ['--bogus']);
  assert.deepStrictEqual(await worker.exit(), { code: 2, signal: null });
  assert.match(worker.err, /usage: zygo_worker\.js/);
});
