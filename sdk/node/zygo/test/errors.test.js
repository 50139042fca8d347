// The client's own mapping of answers, against a stand-in daemon on a unix socket that answers
// what each test sets: every error code to its class with the message, an answer without an
// error body, another API version, pagination by cursor, and where the client looks for the
// daemon. What a real daemon answers is in client.test.js.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import * as zygo from '../index.js';
import { selfSigned } from '../support/realdaemon.js';

// Every code of sdk/go/wire/wire.go with its status and class.
const CODES = {
  not_found: [404, zygo.NotFound], bad_request: [400, zygo.BadRequest], too_large: [413, zygo.TooLarge],
  exists: [409, zygo.AlreadyExists], failed_precondition: [409, zygo.FailedPrecondition],
  permission_denied: [403, zygo.PermissionDenied], unavailable: [503, zygo.Unavailable],
  deadline_exceeded: [504, zygo.DeadlineExceeded], cancelled: [499, zygo.Cancelled],
  internal: [500, zygo.Internal], unauthenticated: [401, zygo.Unauthenticated],
  import_failed: [422, zygo.ImportFailed], too_many_requests: [429, zygo.TooManyRequests],
  method_not_allowed: [405, zygo.MethodNotAllowed], handler_error: [500, zygo.HandlerError],
  timeout: [504, zygo.InvokeTimeout], crashed: [502, zygo.Crashed], zygote_died: [503, zygo.ZygoteDied],
  response_too_large: [502, zygo.ResponseTooLarge], limit_exceeded: [502, zygo.LimitExceeded],
  bad_event: [400, zygo.BadEvent],
};

let dir;
let server;
let answer;
let requests;
let client;

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-u-'));
  requests = [];
  answer = () => [200, {}, '{}'];
  server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests.push([req.method, req.url]);
      const [status, headers, body] = answer(req.method, req.url);
      res.writeHead(status, headers);
      res.end(body);
    });
  });
  await new Promise((r) => server.listen(path.join(dir, 'zygo.sock'), r));
  client = new zygo.Zygo({ stateDir: dir });
});

afterEach(async () => {
  await new Promise((r) => server.close(r));
  fs.rmSync(dir, { recursive: true, force: true });
});

const errorAnswer = (status, code, message = '', extra = {}) => () =>
  [status, { 'content-type': 'application/json' }, JSON.stringify({ error: { code, message, ...extra } })];

describe('error mapping', () => {
  test('every code has its class', async () => {
    assert.deepEqual(Object.keys(CODES).sort(), Object.keys(zygo.ERRORS).filter((c) => c !== 'http').sort());
    for (const [code, [status, Cls]] of Object.entries(CODES)) {
      answer = errorAnswer(status, code, `sandbox "x": ${code} happened`);
      const err = await client.sandboxes.get('x').catch((e) => e);
      assert.ok(err instanceof Cls, `${code}: ${err}`);
      assert.ok(err instanceof zygo.ZygoError);
      assert.deepEqual([err.status, err.code, err.message], [status, code, `sandbox "x": ${code} happened`]);
      assert.equal(zygo.statusOf(code), status);
    }
  });

  test('families', () => {
    assert.ok(zygo.AlreadyExists.prototype instanceof zygo.Conflict);
    assert.ok(zygo.FailedPrecondition.prototype instanceof zygo.Conflict);
    assert.ok(zygo.InvokeTimeout.prototype instanceof zygo.InvokeError);
  });

  test('an invoke error carries type, traceback and request id', async () => {
    answer = errorAnswer(500, 'handler_error', 'boom', { type: 'ValueError', traceback: 'Traceback ...', request_id: 'r-1' });
    const err = await client.functions.invoke('f', {}).catch((e) => e);
    assert.ok(err instanceof zygo.HandlerError);
    assert.deepEqual([err.type, err.traceback, err.requestId, String(err)], ['ValueError', 'Traceback ...', 'r-1', 'boom\nTraceback ...']);
  });

  test('an empty message gets the category', async () => {
    answer = errorAnswer(404, 'not_found');
    await assert.rejects(client.functions.get('f'), (e) => e instanceof zygo.NotFound && e.message === 'not found');
  });

  test('an unknown code is kept', async () => {
    answer = errorAnswer(418, 'teapot', 'short and stout');
    const err = await client.functions.get('f').catch((e) => e);
    assert.equal(err.constructor, zygo.ZygoError);
    assert.deepEqual([err.code, err.status, err.message], ['teapot', 418, 'short and stout']);
  });

  test('an answer without an error body', async () => {
    answer = () => [502, { 'content-type': 'text/html' }, '<h1>Bad Gateway</h1>'];
    const err = await client.status().catch((e) => e);
    assert.ok(err instanceof zygo.HTTPError);
    assert.equal(err.message, 'HTTP 502: <h1>Bad Gateway</h1>');
  });

  test('Retry-After and Allow', async () => {
    answer = () => [429, { 'retry-after': '3' }, JSON.stringify({ error: { code: 'too_many_requests', message: 'over the limit' } })];
    assert.equal((await client.status().catch((e) => e)).retryAfter, 3);
    answer = () => [405, { allow: 'GET, HEAD' }, JSON.stringify({ error: { code: 'method_not_allowed', message: 'no' } })];
    assert.deepEqual((await client.status().catch((e) => e)).allow, ['GET', 'HEAD']);
  });

  test('another API version', async () => {
    for (const [status, body] of [[200, '{"version": "x"}'], [404, '{"error": {"code": "not_found", "message": "m"}}']]) {
      answer = () => [status, { 'zygo-api-version': '2' }, body];
      const err = await client.status().catch((e) => e);
      assert.ok(err instanceof zygo.ApiVersionMismatch, String(err));
      assert.equal(err.message, "the daemon speaks API version 2; this client speaks 1 (use a client of the daemon's release)");
    }
    answer = () => [200, { 'zygo-api-version': '1' }, '{"api_version": 1}'];
    assert.deepEqual(await client.status(), { api_version: 1 });
  });

  test('lists follow the cursor', async () => {
    const pages = { '': [['a', 'b'], 'c2'], c2: [['c'], 'c3'], c3: [[], ''] };
    answer = (m, url) => {
      const [items, next] = pages[new URL(url, 'http://x').searchParams.get('cursor') ?? ''];
      return [200, {}, JSON.stringify({ items: items.map((name) => ({ name })), next_cursor: next })];
    };
    assert.deepEqual((await client.functions.list({ pageSize: 2 })).map((f) => f.name), ['a', 'b', 'c']);
    assert.deepEqual(requests.map(([, u]) => u), ['/v1/functions?limit=2', '/v1/functions?limit=2&cursor=c2', '/v1/functions?limit=2&cursor=c3']);
  });

  test('a list without the envelope is an error', async () => {
    answer = () => [200, {}, '[{"name": "a"}]'];
    await assert.rejects(client.sandboxes.list(), (e) => e instanceof zygo.ZygoError && /not a page of items/.test(e.message));
  });

  test('a fork whose every child failed', async () => {
    const ans = { error: { code: 'unavailable', message: 'every child failed' },
      children: [{ index: 0, error: { code: 'unavailable', message: 'restore failed' } }] };
    answer = () => [503, {}, JSON.stringify(ans)];
    const err = await new zygo.Sandbox(client._t, { id: 'sb-1' }).fork(1).catch((e) => e);
    assert.ok(err instanceof zygo.Unavailable);
    assert.equal(err.answer.children[0].error.message, 'restore failed');
  });

  test('an error event inside a stream', async () => {
    const lines = [{ stream: 'stdout', data: 'aGk=' }, { error: { code: 'failed_precondition', message: 'sandbox died' } }];
    answer = () => [200, { 'content-type': 'application/x-ndjson' }, lines.map((l) => JSON.stringify(l) + '\n').join('')];
    const got = [];
    const proc = await new zygo.Sandbox(client._t, { id: 'sb-1' }).execStream(['true']);
    const err = await (async () => { for await (const ch of proc) got.push(ch.data.toString()); })().catch((e) => e);
    assert.ok(err instanceof zygo.FailedPrecondition, String(err));
    assert.deepEqual([got, err.status, err.message], [['hi'], 409, 'sandbox died']);
  });
});

describe('discovery', () => {
  const keys = ['ZYGO_STATE_DIR', 'ZYGO_ADDR', 'ZYGO_TOKEN', 'ZYGO_CA', 'XDG_STATE_HOME', 'XDG_CONFIG_HOME'];
  let saved;
  let cfg;
  beforeEach(() => {
    saved = Object.fromEntries(keys.map((k) => [k, process.env[k]]));
    for (const k of keys) delete process.env[k];
    cfg = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-cfg-')); // no context file unless a test writes one
    process.env.XDG_CONFIG_HOME = cfg;
  });
  afterEach(() => {
    for (const k of keys) if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
    fs.rmSync(cfg, { recursive: true, force: true });
  });

  test('the context file and what beats it', () => {
    fs.mkdirSync(path.join(cfg, 'zygo'));
    const file = path.join(cfg, 'zygo', 'config.toml');
    fs.writeFileSync(file, 'address = "10.0.0.1:8443"\ntoken = "from-ctx"\nca = "ca.pem"\nserver_name = "z.example"\n', { mode: 0o600 });
    assert.throws(() => new zygo.Zygo(), (err) => err instanceof zygo.ConfigError // the CA is read when the client is made
      && err.message.startsWith(`${file}: the CA file ${cfg}/zygo/ca.pem: ENOENT`));
    const [cert] = selfSigned(cfg);
    for (const name of ['zygo/ca.pem', 'env-ca.pem', 'arg-ca.pem']) fs.copyFileSync(cert, path.join(cfg, name));
    let t = new zygo.Zygo({ stateDir: '/nonexistent' }).target;
    assert.deepEqual([t.addr, t.tls, t.token, t.ca, t.serverName],
      ['10.0.0.1:8443', true, 'from-ctx', path.join(cfg, 'zygo', 'ca.pem'), 'z.example']);
    assert.equal(new zygo.Zygo({ socketPath: '/x.sock' }).where, '/x.sock'); // an explicit socket beats the file
    // The same address given by the environment is the file's own: its token goes there.
    process.env.ZYGO_ADDR = '10.0.0.1:8443';
    assert.equal(new zygo.Zygo({ stateDir: '/nonexistent' }).target.token, 'from-ctx');
    // Another one gets neither token nor server name; the CA still applies (it is no secret).
    process.env.ZYGO_ADDR = 'http://10.0.0.2:80';
    t = new zygo.Zygo({ stateDir: '/nonexistent' }).target;
    assert.deepEqual([t.addr, t.tls, t.token, t.serverName, t.caFrom], ['10.0.0.2:80', false, '', '', file]);
    t = new zygo.Zygo({ addr: '10.0.0.3:1', stateDir: '/nonexistent' }).target;
    assert.deepEqual([t.addr, t.tls, t.token, t.addrFrom], ['10.0.0.3:1', true, '', 'addr']);
    process.env.ZYGO_CA = path.join(cfg, 'env-ca.pem');
    assert.equal(new zygo.Zygo({ addr: '10.0.0.3:1', stateDir: '/nonexistent' }).target.ca, path.join(cfg, 'env-ca.pem'));
    const argCA = path.join(cfg, 'arg-ca.pem');
    assert.equal(new zygo.Zygo({ addr: '10.0.0.3:1', ca: argCA, stateDir: '/nonexistent' }).target.ca, argCA);
    process.env.ZYGO_TOKEN = 'from-env';
    assert.equal(new zygo.Zygo({ stateDir: '/nonexistent' }).target.token, 'from-env');
  });

  test('the socket', () => {
    assert.equal(new zygo.Zygo({ stateDir: '/s' }).where, '/s/zygo.sock');
    process.env.ZYGO_STATE_DIR = '/env';
    assert.equal(new zygo.Zygo().where, '/env/zygo.sock');
    assert.equal(new zygo.Zygo({ stateDir: '/s' }).where, '/s/zygo.sock');
    assert.equal(new zygo.Zygo({ socketPath: '/x.sock' }).where, '/x.sock');
    delete process.env.ZYGO_STATE_DIR;
    const want = process.geteuid() === 0 ? '/var/lib/zygo' : path.join(os.homedir(), '.local/state/zygo');
    assert.equal(new zygo.Zygo().where, `${want}/zygo.sock`);
  });

  test('the TCP token', async () => {
    fs.writeFileSync(path.join(dir, 'api.token'), 'from-file\n');
    process.env.ZYGO_ADDR = '127.0.0.1:9';
    const c = new zygo.Zygo({ stateDir: dir });
    assert.equal(c.where, '127.0.0.1:9');
    assert.equal(c._t.token, 'from-file');
    process.env.ZYGO_TOKEN = 'from-env';
    assert.equal(new zygo.Zygo({ stateDir: dir })._t.token, 'from-env');
    assert.equal(new zygo.Zygo({ stateDir: dir, token: 'given' })._t.token, 'given');
  });

  test('a socket of another user gets no byte', async () => {
    // A server running as uid 12345 (the test runs as root) counts what it receives.
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-o-'));
    fs.chmodSync(d, 0o777);
    const { spawn } = await import('node:child_process');
    const code = "const net=require('net');let n=0;const s=net.createServer((c)=>{c.on('data',(b)=>{n+=b.length});" +
      "setTimeout(()=>{console.log(n);process.exit(0)},1500)});s.listen(process.argv[1],()=>console.log('ready'))";
    const server = spawn(process.execPath, ['-e', code, path.join(d, 'zygo.sock')], { uid: 12345, cwd: '/', stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    server.stdout.on('data', (b) => { out += b; });
    const exited = new Promise((r) => server.once('exit', r));
    while (!out.includes('ready')) await new Promise((r) => setTimeout(r, 50));
    const err = await new zygo.Zygo({ stateDir: d }).status().catch((e) => e);
    assert.ok(err instanceof zygo.Unreachable, String(err));
    assert.match(err.message, /belongs to uid 12345, neither root nor this user/);
    // Nothing connected: the server's timer never started; stop it.
    server.kill();
    await exited;
    fs.rmSync(d, { recursive: true, force: true });
    assert.equal(out.trim(), 'ready');
  });

  test('no daemon is Unreachable', async () => {
    const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-n-'));
    const err = await new zygo.Zygo({ stateDir: empty }).status().catch((e) => e);
    fs.rmSync(empty, { recursive: true });
    assert.ok(err instanceof zygo.Unreachable, String(err));
    assert.match(err.message, new RegExp(`no Zygo daemon answered on ${empty}/zygo.sock`));
  });
});

describe('packDir', () => {
  test('the bundle holds the files with their modes, .git left out', async () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-p-'));
    fs.mkdirSync(path.join(d, 'sub', '.git'), { recursive: true });
    fs.writeFileSync(path.join(d, 'zygo.toml'), 'x');
    fs.writeFileSync(path.join(d, 'sub', 'run.sh'), '#!/bin/sh\n', { mode: 0o700 });
    fs.writeFileSync(path.join(d, 'sub', '.git', 'HEAD'), 'ref');
    const bundle = zygo.packDir(d);
    fs.rmSync(d, { recursive: true });
    const { execFileSync } = await import('node:child_process');
    const listing = execFileSync('tar', ['tvzf', '-'], { input: bundle }).toString();
    const entries = listing.trim().split('\n').map((l) => [l.split(/\s+/)[0], l.split(/\s+/).pop()]);
    assert.deepEqual(entries, [['drwxr-xr-x', 'sub/'], ['-rwxr-xr-x', 'sub/run.sh'], ['-rw-r--r--', 'zygo.toml']]);
  });
});
