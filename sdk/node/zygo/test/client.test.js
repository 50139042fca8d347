// The zygo client against a real daemon (support/realdaemon.js): functions deployed, invoked
// and logged; a gVisor sandbox exec'd (streaming too), runCode, files, checkpoint, fork,
// rollback, generation and kill; errors mapped to their classes with the daemon's message;
// TCP with the token found as the CLI finds it.
//
//   cd sdk/node/zygo && sudo node --test test/

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  API_VERSION, BadRequest, packDir, HandlerError, ImportFailed, InvokeError, MethodNotAllowed, NotFound, Unauthenticated, Zygo,
} from '../index.js';
import { execFileSync } from 'node:child_process';
import { Daemon } from '../support/realdaemon.js';
import { ZYGOIGNORE_DIR_PACKED, bundleEntries, zygoignoreDir } from '../support/zygoignore.js';

const dirs = [];
after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

const D = new Daemon();
before(() => D.start(), { timeout: 900_000 });
after(() => D.stop(), { timeout: 300_000 });

function functionDir(name, mainPy) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-fn-'));
  dirs.push(d);
  fs.writeFileSync(path.join(d, 'zygo.toml'), `name = "${name}"\nruntime = "python"\nhandler = "main:handler"\n`);
  fs.writeFileSync(path.join(d, 'main.py'), mainPy);
  return d;
}

describe('functions', () => {
  let c;
  let dir;
  let deployed;
  before(async () => {
    c = D.client();
    dir = functionDir('jsecho', [
      'def handler(event, context):',
      '    print("echoing", event.get("n"))',
      '    if event.get("fail"):',
      '        raise ValueError("asked to fail")',
      '    return {"n": event.get("n"), "request_id": context.request_id}',
      '',
    ].join('\n'));
    deployed = await c.functions.deploy(dir);
  });

  test('deploy, invoke, logs', async () => {
    assert.equal(deployed.name, 'jsecho');
    assert.match(deployed.version, /^sha256:/);
    assert.equal((await c.functions.deploy(dir)).unchanged, true);
    const r = await c.functions.invoke('jsecho', { n: 7 });
    assert.equal(r.value.n, 7);
    assert.equal(r.value.request_id, r.requestId);
    assert.equal(r.version, deployed.version);
    assert.ok(r.serverTiming.length > 0, 'no Server-Timing phases');
    const logs = await c.functions.logs('jsecho', { requestId: r.requestId });
    assert.deepEqual(logs.lines.filter((l) => l.stream === 'stdout').map((l) => l.line), ['echoing 7']);
    const later = await c.functions.logs('jsecho', { requestId: r.requestId, after: logs.next });
    assert.deepEqual(later.lines, []);
  });

  test('get, list, remove', async () => {
    await c.functions.deploy(functionDir('jstmp', 'def handler(event, context):\n    return 1\n'));
    assert.equal((await c.functions.get('jstmp')).name, 'jstmp');
    assert.ok((await c.functions.list()).some((f) => f.name === 'jstmp'));
    assert.ok((await c.functions.list({ pageSize: 1 })).some((f) => f.name === 'jstmp'));
    await c.functions.remove('jstmp');
    await assert.rejects(c.functions.get('jstmp'), NotFound);
  });

  test('a missing function is NotFound with the message', async () => {
    const err = await c.functions.invoke('no-such-fn', {}).catch((e) => e);
    assert.ok(err instanceof NotFound, String(err));
    assert.equal(err.status, 404);
    assert.equal(err.code, 'not_found');
    assert.equal(err.message, 'function "no-such-fn" not found');
  });

  test('a handler error carries its traceback', async () => {
    const err = await c.functions.invoke('jsecho', { fail: true }).catch((e) => e);
    assert.ok(err instanceof HandlerError && err instanceof InvokeError, String(err));
    assert.equal(err.status, 500);
    assert.match(err.message, /asked to fail/);
    assert.match(err.traceback ?? '', /ValueError/);
    assert.ok(err.requestId);
  });

  test('bad input is BadRequest naming the field', async () => {
    const err = await c.functions.logs('jsecho', { limit: 0 }).catch((e) => e);
    assert.ok(err instanceof BadRequest, String(err));
    assert.equal(err.status, 400);
    assert.match(err.message, /limit/);
  });

  test('an import failure is ImportFailed', async () => {
    const err = await c.functions.deploy(functionDir('jsbroken', "raise RuntimeError('broken at import')\n")).catch((e) => e);
    assert.ok(err instanceof ImportFailed, String(err));
    assert.match(`${err.message}\n${err.traceback}`, /broken at import/);
  });

  test('packDir refuses a link', async () => {
    const d = functionDir('jslink', 'def handler(e, c):\n    return 1\n');
    fs.symlinkSync('/etc/passwd', path.join(d, 'passwd'));
    await assert.rejects(c.functions.deploy(d), /passwd: not a regular file/);
  });

  test('a .zygoignore\'d directory deploys as the same version as from zygo up', async () => {
    // zygo up packs with the Go SDK's PackDir; what .zygoignore and the defaults leave out
    // (a real .venv with its links among them) is not uploaded.
    const d = zygoignoreDir('jsignore');
    dirs.push(d);
    const byGo = JSON.parse(execFileSync(D.bin, ['up', d, '--state-dir', D.stateDir, '-o', 'json'],
      { env: { ...process.env, XDG_CONFIG_HOME: D.stateDir }, stdio: ['ignore', 'pipe', 'pipe'] }));
    assert.deepEqual(bundleEntries(packDir(d)), ZYGOIGNORE_DIR_PACKED);
    const byClient = await c.functions.deploy(d);
    assert.equal(byClient.version, byGo.version);
    assert.equal(byClient.unchanged, true);
  });
});

describe('contract', () => {
  test('the daemon speaks this API version', async () => {
    assert.equal((await D.client().status()).api_version, API_VERSION);
  });

  test('a wrong method is MethodNotAllowed', async () => {
    const err = await D.client()._t.call('PATCH', '/v1/functions').catch((e) => e);
    assert.ok(err instanceof MethodNotAllowed, String(err));
    assert.equal(err.status, 405);
    assert.ok(err.allow.includes('GET'), err.allow.join(','));
  });
});

describe('tcp', () => {
  test('the token comes from the state dir', async () => {
    const st = await new Zygo({ addr: D.addr, stateDir: D.stateDir }).status();
    assert.ok('version' in st);
  });

  test('addr and token from the environment', async () => {
    const token = fs.readFileSync(path.join(D.stateDir, 'api.token'), 'utf8').trim();
    const saved = { ...process.env };
    Object.assign(process.env, { ZYGO_ADDR: D.addr, ZYGO_TOKEN: token, ZYGO_STATE_DIR: '/nonexistent' });
    try {
      const c = new Zygo();
      assert.equal(c.where, D.addr);
      assert.ok('version' in (await c.status()));
    } finally {
      for (const k of ['ZYGO_ADDR', 'ZYGO_TOKEN', 'ZYGO_STATE_DIR']) {
        if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
      }
    }
  });

  test('a wrong token is Unauthenticated', async () => {
    const err = await new Zygo({ addr: D.addr, token: 'wrong' }).status().catch((e) => e);
    assert.ok(err instanceof Unauthenticated, String(err));
    assert.equal(err.status, 401);
  });
});

describe('sandboxes', () => {
  let c;
  let sb;
  before(async () => {
    c = D.client();
    sb = await c.sandboxes.create({ name: 'jssb', memoryMib: 256 });
  }, { timeout: 300_000 });
  after(() => sb?.dispose());

  test('exec', async () => {
    let r = await sb.exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString()], [3, 'out\n', 'err\n']);
    r = await sb.exec(['cat'], { stdin: 'given whole' });
    assert.equal(r.stdout.toString(), 'given whole');
    r = await sb.exec(['sh', '-c', 'echo $A; pwd'], { env: ['A=1'], cwd: '/tmp' });
    assert.equal(r.stdout.toString(), '1\n/tmp\n');
  });

  test('a missing program exits 127', async () => {
    const r = await sb.exec(['no-such-program']);
    assert.equal(r.exitCode, 127);
    assert.match(r.stderr.toString(), /no-such-program/);
  });

  test('exec streams output as it comes', async () => {
    // Each line is printed only after the client has received the one before: the command
    // waits for a file the loop below writes when it sees a line.
    await sb.exec(['sh', '-c', 'rm -f /tmp/ack*']);
    const script = 'for i in 1 2 3; do echo $i; while [ ! -e /tmp/ack$i ]; do sleep 0.05; done; done';
    const proc = await sb.execStream(['sh', '-c', script], { timeout: 120 });
    const seen = [];
    for await (const chunk of proc) {
      assert.equal(chunk.stream, 'stdout');
      seen.push(chunk.data.toString());
      await sb.files.write(`/tmp/ack${chunk.data.toString().trim()}`, '');
    }
    assert.deepEqual(seen, ['1\n', '2\n', '3\n']);
    assert.equal(proc.exitCode, 0);
  });

  test('exec streams stdin', async () => {
    async function* chunks() {
      yield Buffer.alloc(70000, 'x');
      yield Buffer.from('yyyyy');
      yield 'z';
    }
    const r = await sb.exec(['sh', '-c', 'wc -c; echo done >&2'], { stdin: chunks() });
    assert.deepEqual([r.stdout.toString().trim(), r.stderr.toString()], ['70006', 'done\n']);
  });

  test('a stdin that fails abandons the call', async () => {
    async function* chunks() {
      yield Buffer.from('partial');
      throw new Error('the disk went away');
    }
    await assert.rejects(sb.exec(['sh', '-c', 'echo $$ >/tmp/jsabandoned.pid; exec cat >/tmp/jsabandoned'], { stdin: chunks() }));
    // The command was killed, not left waiting for the rest of its stdin.
    const r = await sb.exec(['sh', '-c', 'for i in $(seq 100); do kill -0 $(cat /tmp/jsabandoned.pid) 2>/dev/null || exit 0; sleep 0.1; done; exit 1']);
    assert.equal(r.exitCode, 0, 'the abandoned command still runs');
  });

  test('runCode', async () => {
    let r = await sb.runCode("counter = 41\nprint('hi')\ncounter + 1");
    assert.deepEqual([r.ok, r.value, r.stdout], [true, '42', 'hi\n']);
    r = await sb.runCode('counter / 0');
    assert.equal(r.ok, false);
    assert.match(r.error, /ZeroDivisionError/);
    assert.equal((await sb.runCode('counter')).value, '41');
  });

  test('files', async () => {
    await sb.files.write('/tmp/jsfiles/a.txt', 'alpha', { mode: 0o600 });
    const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    await sb.files.write('/tmp/jsfiles/b.bin', bin);
    assert.equal((await sb.files.read('/tmp/jsfiles/a.txt')).toString(), 'alpha');
    assert.deepEqual(await sb.files.read('/tmp/jsfiles/b.bin'), bin);
    const ls = Object.fromEntries((await sb.files.list('/tmp/jsfiles')).map((e) => [e.name, e]));
    assert.deepEqual(Object.keys(ls).sort(), ['a.txt', 'b.bin']);
    assert.deepEqual([ls['a.txt'].size, ls['a.txt'].mode & 0o777], [5, 0o600]);
    await assert.rejects(sb.files.read('/tmp/jsfiles/none'), NotFound);
  });

  test('get and list', async () => {
    assert.equal((await c.sandboxes.get('jssb')).id, sb.id);
    assert.ok((await c.sandboxes.list()).some((s) => s.id === sb.id));
    const err = await c.sandboxes.get('sb-0000000000000000').catch((e) => e);
    assert.ok(err instanceof NotFound, String(err));
    assert.match(err.message, /sb-0000000000000000/);
  });

  test('bad input is BadRequest naming the field', async () => {
    let err = await sb.fork(0).catch((e) => e);
    assert.ok(err instanceof BadRequest, String(err));
    assert.match(err.message, /\bn\b/);
    err = await c.sandboxes.create({ memory_mib: 1 }).catch((e) => e);
    assert.ok(err instanceof BadRequest, String(err));
    assert.match(err.message, /memory_mib/);
    await assert.rejects(sb.rollback('no-such-checkpoint'), NotFound);
  });

  test('checkpoint, fork, rollback, kill', { timeout: 600_000 }, async () => {
    let id;
    let kids;
    await c.sandboxes.use({ memory_mib: 256 }, async (s) => {
      id = s.id;
      await s.files.write('/tmp/state', 'before');
      await s.runCode("token = 'kept'");
      const g0 = await s.generation();
      const cp = await s.checkpoint('jsbase');
      assert.equal(cp.tag, 'jsbase');
      assert.equal(cp.sandbox_id, s.id);
      assert.ok((await s.checkpoints()).some((x) => x.id === cp.id));
      assert.ok((await c.checkpoints.list({ sandbox: s.id })).some((x) => x.id === cp.id));

      await s.files.write('/tmp/state', 'after');
      const fork = await s.fork(2, cp, { names: ['js-kid-a', 'js-kid-b'] });
      try {
        assert.equal(fork.checkpoint.id, cp.id);
        kids = fork.sandboxes;
        assert.equal(kids.length, 2, JSON.stringify(fork.children.map((k) => k.error?.message)));
        assert.deepEqual(kids.map((k) => k.record.name), ['js-kid-a', 'js-kid-b']);
        assert.equal((await c.sandboxes.get('js-kid-b')).id, kids[1].id);
        const gens = new Set(await Promise.all(kids.map((k) => k.generation())));
        gens.add(g0);
        assert.equal(gens.size, 3, 'children share a generation');
        for (const k of kids) {
          assert.equal((await k.files.read('/tmp/state')).toString(), 'before');
          assert.equal((await k.runCode('token')).value, "'kept'");
          assert.equal(k.record.parent_id, s.id);
        }
      } finally {
        await fork.dispose();
      }
      for (const k of kids) await assert.rejects(c.sandboxes.get(k.id), NotFound);

      await s.rollback('jsbase');
      assert.equal((await s.files.read('/tmp/state')).toString(), 'before');
      const g1 = await s.generation();
      assert.notEqual(g1, g0);
      assert.equal(s.record.generation, g1);
    });
    await assert.rejects(c.sandboxes.get(id), NotFound); // use() killed it
    await assert.rejects(c.sandboxes.get(id).then((s) => s.kill()), NotFound);
  });
});
