'use strict';
// Unit tests of the agent's modules, in this process (no worker).

const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const wire = require('../wire');
const errors = require('../errors');
const loader = require('../loader');
const request = require('../request');
const { Worker } = require('../testdata/harness');

test('wire.encode: one line, at most 64 KiB; long import errors are cut to fit', () => {
  assert.strictEqual(wire.encode({ type: 'ready', pid: 2 }), '{"type":"ready","pid":2}\n');
  const big = { type: 'import_error',
    error: { type: 'E', message: 'm'.repeat(9000), traceback: '\u4e00'.repeat(40000) } };
  const line = wire.encode(big);
  assert.ok(Buffer.byteLength(line) <= wire.MAX_LINE);
  assert.strictEqual(line.indexOf('\n'), line.length - 1);
  assert.strictEqual(JSON.parse(line).error.message.length, 9000);
  assert.throws(() => wire.encode({ type: 'ready', checks: 'x'.repeat(70000) }), RangeError);
});

test('wire.parseLine: objects with a string type only', () => {
  assert.deepStrictEqual(wire.parseLine('{"type":"go","x":1}'), { type: 'go', x: 1 });
  for (const bad of ['nope', '[]', '{"type":1}', 'null', '"go"']) {
    assert.strictEqual(wire.parseLine(bad), null, bad);
  }
});

test('wire.lineReader: lines across chunks and split characters, none after done', () => {
  const got = [];
  let stop = false;
  const feed = wire.lineReader((msg) => {
    got.push(msg);
    if (msg.type === 'go') stop = true;
  }, () => stop);
  const bytes = Buffer.from('{"type":"a","s":"ž"}\n{"type":"go"}\n{"type":"late"}\n');
  const cut = bytes.indexOf(0xc5) + 1; // inside the two bytes of ž
  feed(bytes.subarray(0, 5));
  feed(bytes.subarray(5, cut));
  const reused = Buffer.from(bytes.subarray(cut)); // the caller may reuse its buffer after
  feed(reused);
  reused.fill(0);
  assert.deepStrictEqual(got, [{ type: 'a', s: 'ž' }, { type: 'go' }]);
});

test('errors.describe never throws and names what was thrown', () => {
  const hostile = new Error('x');
  Object.defineProperty(hostile, 'message', { get() { throw new Error('no'); } });
  assert.strictEqual(errors.describe(hostile).message, '<message unreadable>');
  assert.deepStrictEqual(errors.describe(null), { type: 'null', message: 'null', traceback: '' });
  assert.strictEqual(errors.describe(42).type, 'number');
  assert.strictEqual(errors.describe({ code: 1 }).type, 'Object');
  assert.strictEqual(errors.describe(Object.create(null)).type, 'object');
  const withCause = new Error('outer', { cause: new Error('inner') });
  withCause.code = 'E_X';
  const d = errors.describe(withCause);
  assert.match(d.traceback, /\[cause\]: Error: inner/);
  assert.match(d.traceback, /code: 'E_X'/);
  assert.strictEqual(errors.describe(new Error('m'.repeat(9000))).message.length,
    8192 + '... [808 characters cut]'.length);
});

test('errors.dropAgentFrames drops the agent\'s files only', () => {
  const agent = path.join(__dirname, '..', 'zygo_worker.js');
  const user = path.join(__dirname, '..', 'testdata', 'fixtures', 'x', 'main.js');
  const trace = `E: m\n    at serve (${agent}:10:3)\n    at h (${user}:1:1)\n    at node:internal/x:1:1`;
  assert.strictEqual(errors.dropAgentFrames(trace),
    `E: m\n    at h (${user}:1:1)\n    at node:internal/x:1:1`);
});

test('loader.parseSpec, resolveFile and moduleKind', () => {
  assert.deepStrictEqual(loader.parseSpec('lib/app.js:handler'),
    { file: 'lib/app.js', exportName: 'handler' });
  for (const bad of ['app.js', ':handler', 'app.js:', '', undefined]) {
    assert.throws(() => loader.parseSpec(bad), TypeError, String(bad));
  }
  assert.strictEqual(loader.resolveFile('/code', 'a/b.js'), '/code/a/b.js');
  assert.throws(() => loader.resolveFile('/code', '../etc/x.js'), TypeError);
  assert.throws(() => loader.resolveFile('/code', '/code/x.js'), TypeError);
  const fixtures = path.join(__dirname, '..', 'testdata', 'fixtures');
  assert.strictEqual(loader.moduleKind(path.join(fixtures, 'esm_mjs', 'main.mjs')), 'esm');
  assert.strictEqual(loader.moduleKind(path.join(fixtures, 'esm_type_module', 'main.js')), 'esm');
  assert.strictEqual(loader.moduleKind(path.join(fixtures, 'esm_type_module', 'x.cjs')), 'cjs');
  assert.strictEqual(loader.moduleKind(path.join(fixtures, 'cjs', 'main.js')), 'cjs');
});

test('loader.findExport: own export, then default[EXPORT]', () => {
  const f = () => 1;
  assert.deepStrictEqual(loader.findExport({ h: f }, 'h', 'self'), { fn: f, self: 'self' });
  const holder = { h: f };
  assert.deepStrictEqual(loader.findExport({ default: holder }, 'h', undefined), { fn: f, self: holder });
  assert.strictEqual(loader.findExport({ h: 1 }, 'h'), null);
  assert.strictEqual(loader.findExport(new Proxy({}, { get() { throw new Error('x'); } }), 'h'), null);
});

test('request.parseGo validates the fields and turns deadline_ms into epoch ms', () => {
  const go = { type: 'go', request_id: 'r-1', dir: '/run/zygo/req/ab', deadline_ms: 1500,
    function: 'f', version: 'sha256:1' };
  assert.deepStrictEqual(request.parseGo(go, 1000), { requestId: 'r-1', dir: '/run/zygo/req/ab',
    deadline: 2500, function: 'f', version: 'sha256:1' });
  const { function: _f, version: _v, ...bare } = go;
  assert.deepStrictEqual(request.parseGo(bare, 0).function, '');
  for (const [key, value] of [['request_id', 3], ['dir', 'rel/dir'], ['deadline_ms', -1],
    ['deadline_ms', 1.5], ['deadline_ms', '10'], ['function', 7]]) {
    assert.throws(() => request.parseGo({ ...go, [key]: value }), new RegExp(`go: ${key}`));
  }
});

test('request.makeContext: remaining time never below 0', () => {
  const ctx = request.makeContext({ requestId: 'r', function: 'f', version: 'v', deadline: 0 });
  assert.strictEqual(ctx.getRemainingTimeInMillis(), 0);
  assert.strictEqual(ctx.deadline, 0);
});

test('request.encodeOutcome', () => {
  assert.strictEqual(request.encodeOutcome({ ok: true, value: [1, 'a'] }), '{"ok":true,"value":[1,"a"]}');
  assert.strictEqual(request.encodeOutcome({ ok: true }), '{"ok":true,"value":null}');
  const thrower = { toJSON() { throw new RangeError('nope'); } };
  assert.deepStrictEqual(JSON.parse(request.encodeOutcome({ ok: true, value: thrower })),
    { ok: false, error: { type: 'RangeError',
      message: 'handler result is not JSON-serialisable: nope', traceback: '' } });
  assert.strictEqual(JSON.parse(request.encodeOutcome({ ok: true, value: Symbol('s') })).error.type,
    'TypeError');
});

test('request.fileWriter writes strings and bytes synchronously, calls back on next tick', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zygo-fw-'));
  const file = path.join(dir, 'out');
  const fd = fs.openSync(file, 'a');
  const write = request.fileWriter(fd);
  assert.strictEqual(write('a'), true);
  write('62', 'hex');
  await new Promise((resolve) => write(new Uint8Array([99]), (err) => {
    assert.strictEqual(err, null);
    resolve();
  }));
  assert.throws(() => write(42), TypeError);
  fs.closeSync(fd);
  assert.strictEqual(fs.readFileSync(file, 'utf8'), 'abc');
  fs.rmSync(dir, { recursive: true });
});

test('warm-up: handles open at import are named; a socket or server makes it a warning', async () => {
  const worker = new Worker('handles', 'main.mjs:handler');
  const ready = await worker.next();
  worker.control.end();
  await worker.exit();
  const handles = ready.checks.find((c) => c.name === 'handles');
  assert.strictEqual(handles.level, 'warn');
  const kinds = handles.items.map((i) => i.kind).sort();
  assert.deepStrictEqual(kinds, ['server', 'socket', 'socket', 'timers']);
  const server = handles.items.find((i) => i.kind === 'server');
  assert.match(server.address, /^127\.0\.0\.1:\d+$/);
  assert.ok(handles.items.some((i) => i.kind === 'socket' && i.peer === server.address));
  assert.match(handles.detail, /server tcp 127\.0\.0\.1:\d+/);
  const libcrypto = ready.checks.find((c) => c.name === 'libcrypto');
  assert.deepStrictEqual([libcrypto.level, libcrypto.version], ['info', process.versions.openssl]);
});

test('request.decodeEvent: what JSON.parse refuses is a rejected event naming the field', () => {
  assert.deepStrictEqual(request.decodeEvent('{"n":[1,2.5]}'), { n: [1, 2.5] });
  for (const text of ['{', '[1,]', '\u0000']) {
    assert.throws(() => request.decodeEvent(text), request.EventRejected);
  }
  let caught;
  try {
    request.decodeEvent('{"a":');
  } catch (err) {
    caught = err;
  }
  const out = JSON.parse(request.encodeOutcome(request.rejectedOutcome(caught)));
  assert.strictEqual(out.ok, false);
  assert.strictEqual(out.rejected, 'event');
  assert.strictEqual(out.error.type, 'EventRejected');
  assert.ok(out.error.message.startsWith('event: '), out.error.message);
});
