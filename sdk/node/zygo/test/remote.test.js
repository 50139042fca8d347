// The client finds a remote daemon as the CLI does: a real daemon serving TLS on 127.0.0.1
// with a self-signed certificate, reached through the context file only (address, token, ca);
// a wrong CA or name is a CertificateError; the file's token never goes to an address given by
// option or $ZYGO_ADDR (a plain HTTP listener records what it receives); unknown keys, a token
// file others can read, bad schemes and lines the strict parser does not take are ConfigErrors;
// an exec's stdin streams over TLS while its output is read.
//
//   cd sdk/node/zygo && sudo node --test test/

import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CertificateError, ConfigError, Unauthenticated, Unreachable, Zygo, parseContext } from '../index.js';
import { Daemon, selfSigned } from '../support/realdaemon.js';

const certs = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-certs-'));
after(() => fs.rmSync(certs, { recursive: true, force: true }));

let D;
let secret;
before(async () => {
  D = new Daemon({ tls: selfSigned(certs) });
  await D.start();
  secret = D.createToken('t');
}, { timeout: 900_000 });
after(() => D?.stop(), { timeout: 300_000 });

function setEnv(k, v) {
  if (v === undefined || v === null) delete process.env[k];
  else process.env[k] = v;
}

/**
 * Writes body as the context file under a fresh $XDG_CONFIG_HOME (mode mode) with ca.pem (the
 * daemon's certificate) beside it; unsets $ZYGO_ADDR, $ZYGO_TOKEN, $ZYGO_CA and points
 * $ZYGO_STATE_DIR at a directory without api.token, until the test t ends. env sets more.
 */
function context(t, body, { mode = 0o600, env = {} } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-cfg-'));
  const file = path.join(dir, 'zygo', 'config.toml');
  fs.mkdirSync(path.dirname(file));
  fs.writeFileSync(file, body);
  fs.chmodSync(file, mode);
  fs.copyFileSync(path.join(certs, 'cert.pem'), path.join(dir, 'zygo', 'ca.pem'));
  const want = { XDG_CONFIG_HOME: dir, ZYGO_ADDR: null, ZYGO_TOKEN: null, ZYGO_CA: null, ZYGO_STATE_DIR: dir, ...env };
  const old = Object.fromEntries(Object.keys(want).map((k) => [k, process.env[k]]));
  Object.entries(want).forEach(([k, v]) => setEnv(k, v));
  t.after(() => {
    Object.entries(old).forEach(([k, v]) => setEnv(k, v));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { dir, file };
}

/** The context file of the TLS daemon: its https address, the token t, ca.pem beside it. */
function tlsContext(t, extra = '') {
  return context(t, `address = "https://${D.addr}"\ntoken = "${secret}"\nca = "ca.pem"  # relative to this file\n${extra}`);
}

describe('finding a remote daemon', () => {
  test('functions over TLS from the context file', async (t) => {
    tlsContext(t);
    const c = new Zygo();
    assert.equal(c.where, `https://${D.addr}`);
    assert.equal(c.target.tokenFrom, c.target.contextPath);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-fn-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.writeFileSync(path.join(dir, 'zygo.toml'), 'name = "jstls"\nruntime = "python"\nhandler = "main:handler"\n');
    fs.writeFileSync(path.join(dir, 'main.py'), 'def handler(event, context):\n    return {"got": event}\n');
    await c.functions.deploy(dir);
    assert.ok((await c.functions.list()).some((f) => f.name === 'jstls'));
    assert.deepEqual((await c.functions.invoke('jstls', { n: 1 })).value, { got: { n: 1 } });
  });

  test('host:port with a CA is TLS', async (t) => {
    context(t, `address = "${D.addr}"\ntoken = "${secret}"\nca = "ca.pem"\n`);
    const c = new Zygo();
    assert.equal(c.where, `https://${D.addr}`);
    assert.ok('version' in (await c.status()));
  });

  test('a wrong token in the file is Unauthenticated', async (t) => {
    context(t, `address = "https://${D.addr}"\ntoken = "zygo_wrong"\nca = "ca.pem"\n`);
    await assert.rejects(new Zygo().status(), Unauthenticated);
  });

  test('a wrong CA is a CertificateError', async (t) => {
    const { dir } = tlsContext(t);
    const [other] = selfSigned(dir, 'other');
    const err = await new Zygo({ ca: other }).status().then(() => null, (e) => e);
    assert.ok(err instanceof CertificateError, String(err));
    assert.ok(!(err instanceof Unreachable));
    assert.match(err.message, /not signed by a CA this client trusts/);
    assert.match(err.message, /\$ZYGO_CA/);
  });

  test('a certificate for another name is a CertificateError', async (t) => {
    tlsContext(t, 'server_name = "zygo.example.com"\n');
    const err = await new Zygo().status().then(() => null, (e) => e);
    assert.ok(err instanceof CertificateError, String(err));
    assert.match(err.message, /not for zygo\.example\.com/);
  });

  test('the file token never goes to another address', async (t) => {
    const auth = [];
    const srv = http.createServer((req, res) => {
      auth.push(req.headers.authorization ?? null);
      res.writeHead(200, { 'zygo-api-version': '1', 'content-type': 'application/json' });
      res.end('{"version": "recorder", "api_version": 1}');
    });
    await new Promise((r) => srv.listen(0, '127.0.0.1', r));
    t.after(() => srv.close());
    const rec = `127.0.0.1:${srv.address().port}`;
    tlsContext(t);
    // ca from the file would make host:port TLS; http:// forces plain.
    await new Zygo({ addr: `http://${rec}` }).status();
    process.env.ZYGO_ADDR = `http://${rec}`;
    await new Zygo().status();
    await new Zygo({ addr: `http://${rec}`, token: 'given' }).status(); // the recorder does record a token
    assert.deepEqual(auth, [null, null, 'Bearer given']);
  });

  test('an unknown key is refused', (t) => {
    const { file } = context(t, `address = "https://${D.addr}"\nadress = "x"\n`);
    assert.throws(() => new Zygo(), (err) => err instanceof ConfigError
      && err.message === `the context file ${file}: unknown key 'adress' (known: address, token, ca, server_name)`);
  });

  test('a token file others can read is refused', (t) => {
    const { file } = context(t, `address = "https://${D.addr}"\ntoken = "${secret}"\n`, { mode: 0o644 });
    assert.throws(() => new Zygo(), (err) => err instanceof ConfigError
      && err.message === `the context file ${file} holds a token and has mode 644: chmod 600 it`);
    context(t, `address = "https://${D.addr}"\nca = "ca.pem"\n`, { mode: 0o644 }); // no token: fine
    assert.equal(new Zygo().where, `https://${D.addr}`);
  });

  test('a bad scheme names where it came from', (t) => {
    const { file } = context(t, 'address = "ftp://127.0.0.1:1"\n');
    assert.throws(() => new Zygo(), (err) => err instanceof ConfigError && err.message.startsWith(`${file} 'ftp://`));
    context(t, '', { env: { ZYGO_ADDR: 'ftp://127.0.0.1:1' } });
    assert.throws(() => new Zygo(), (err) => err instanceof ConfigError && err.message.startsWith("$ZYGO_ADDR 'ftp://"));
    assert.throws(() => new Zygo({ addr: '127.0.0.1' }), (err) => err instanceof ConfigError
      && err.message.startsWith("the option addr '127.0.0.1': want host:port"));
  });
});

describe('the strict context file parser', () => {
  test('takes basic and literal strings, escapes, comments and blank lines', () => {
    const text = '# a laptop\n\naddress = "https://h:1"  # trailing\r\ntoken=\'zygo_\\raw\'\nca = "d\\u00e9j\\u00E0\\t\\"q\\"\\\\"\n';
    assert.deepEqual(parseContext(text, 'F'), { address: 'https://h:1', token: 'zygo_\\raw', ca: 'déjà\t"q"\\' });
  });

  test('refuses anything else, naming the line', () => {
    for (const [text, want] of [
      ['address = "x"\n[server]\n', 'the context file F, line 2: want key = "string"'],
      ['address = 8443\n', 'the context file F, line 1: address: want key = "string" (the context file holds strings only)'],
      ['address = """x"""\n', 'the context file F, line 1: address: text after the string'],
      ['address = "x" y\n', 'the context file F, line 1: address: text after the string'],
      ['token = "x\n', 'the context file F, line 1: token: an unterminated string'],
      ['ca = "\\q"\n', 'the context file F, line 1: ca: a bad escape \\q'],
      ['ca = "\\ud800"\n', 'the context file F, line 1: ca: a bad \\u escape'],
      ['\n\nca = "a"\nca = "b"\n', 'the context file F, line 4: ca is set twice'],
      ['"address" = "x"\n', 'the context file F, line 1: want key = "string"'],
      ['server.name = "x"\n', 'the context file F, line 1: want key = "string"'],
    ]) {
      assert.throws(() => parseContext(text, 'F'), (err) => err instanceof ConfigError && err.message.startsWith(want),
        `${JSON.stringify(text)}: want ${want}`);
    }
  });
});

describe('streaming stdin over TLS', () => {
  let sb;
  before(async () => {
    sb = await D.client().sandboxes.create({ name: 'jstls', memoryMib: 256 });
  }, { timeout: 300_000 });
  after(() => sb?.dispose());

  test('stdin and output stream together', async (t) => {
    // Each line of stdin is sent only after cat's echo of the line before came back.
    tlsContext(t);
    const remote = await new Zygo().sandboxes.get(sb.id);
    let echoed = 0;
    const waiters = [];
    const waitFor = (n) => new Promise((r) => (echoed >= n ? r() : waiters.push([n, r])));
    async function* lines() {
      for (let i = 1; i <= 3; i++) {
        yield Buffer.from(`line ${i}\n`);
        await waitFor(i);
      }
    }
    const proc = await remote.execStream(['cat'], { stdin: lines(), timeout: 120 });
    let seen = '';
    for await (const chunk of proc) {
      seen += chunk.data.toString();
      echoed = seen.split('\n').length - 1;
      for (const w of waiters.splice(0)) {
        if (echoed >= w[0]) w[1]();
        else waiters.push(w);
      }
    }
    assert.equal(seen, 'line 1\nline 2\nline 3\n');
    assert.equal(proc.exitCode, 0);
  });

  test('a large stdin', async (t) => {
    tlsContext(t);
    const remote = await new Zygo().sandboxes.get(sb.id);
    async function* chunks() {
      yield Buffer.alloc(300000, 'x');
      yield Buffer.from('yyyyy');
      yield 'z';
    }
    const r = await remote.exec(['sh', '-c', 'wc -c; echo done >&2'], { stdin: chunks() });
    assert.deepEqual([r.stdout.toString().trim(), r.stderr.toString()], ['300006', 'done\n']);
  });
});
