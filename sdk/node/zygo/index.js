// Zygo's TypeScript/JavaScript client (ESM, no dependencies; types in index.d.ts): deploy and
// invoke functions, and drive gVisor sandboxes that are checkpointed, forked N ways and rolled
// back, from outside them. Code inside a sandbox uses ../zygo-sandbox instead.
//
//   import { Zygo } from 'zygo';
//   const client = new Zygo();                       // finds the daemon as the zygo CLI does
//   await client.functions.deploy('examples/hello');
//   const { value } = await client.functions.invoke('hello', { name: 'x' });
//   await client.sandboxes.use({ name: 'agent' }, async (sb) => {   // killed at the end
//     await sb.runCode('x = 41');
//     const cp = await sb.checkpoint('base');
//     const fork = await sb.fork(3);
//     ...
//   });

import { NotFound, ZygoError, fromBody, statusOf } from './errors.js';
import { packDir } from './bundle.js';
import { resolveTarget } from './context.js';
import { Transport, defaultStateDir, ndjson, paginate, readAll } from './transport.js';

export * from './errors.js';
export { packDir } from './bundle.js';
export { defaultStateDir } from './transport.js';
export { contextPath, parseContext } from './context.js';

/** The daemon's unix socket's name inside its state directory. */
export const SOCKET_NAME = 'zygo.sock';
/** The file, in the state directory, holding the bearer token of the daemon's TCP listener. */
export const TOKEN_NAME = 'api.token';
/** The daemon's default bound on a fork's n. */
export const MAX_FORK_N = 16;

/** stateDir, else $ZYGO_STATE_DIR, else defaultStateDir(). */
export function resolveStateDir(stateDir) {
  return stateDir || process.env.ZYGO_STATE_DIR || defaultStateDir();
}

const enc = encodeURIComponent;
const sbPath = (id, ...rest) => ['/v1/sandboxes', enc(id), ...rest].join('/');
const fnPath = (name, ...rest) => ['/v1/functions', enc(name), ...rest].join('/');
const cpRef = (cp) => (typeof cp === 'string' ? cp : cp.id);
const streamError = (body) => fromBody(statusOf(body.code ?? ''), body);

/**
 * A client of one Zygo daemon. It finds the daemon as the zygo CLI does (context.js): each
 * setting is the option, else its environment variable, else the context file
 * ($XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml: keys address, token,
 * ca, server_name), else a default:
 *
 * - addr (or socketPath, a unix socket), $ZYGO_ADDR, address: "host:port" (plain HTTP; TLS
 *   when a CA or server name is set), "https://host:port" (TLS) or "http://host:port";
 *   default zygo.sock in stateDir, else in $ZYGO_STATE_DIR, else in defaultStateDir();
 * - token, $ZYGO_TOKEN, token (sent only to the file's own address, never to one given by
 *   option or $ZYGO_ADDR), else api.token in the state directory;
 * - ca (a PEM CA file, or the daemon's self-signed certificate), $ZYGO_CA, ca (relative to
 *   the file); default the system's roots;
 * - serverName, server_name (with the file's address only): the name the certificate must
 *   hold; default the address's host.
 *
 * Throws ConfigError (naming the option, variable or file at fault) for an address that does
 * not parse, a context file that does not parse or holds a key it does not know, or one
 * holding a token that group or others may read.
 */
export class Zygo {
  constructor({ stateDir, socketPath, addr, token, ca, serverName } = {}) {
    this.target = resolveTarget({ stateDir: resolveStateDir(stateDir), socketPath, addr, token, ca, serverName });
    this._t = new Transport(this.target);
    this.functions = new Functions(this._t);
    this.sandboxes = new Sandboxes(this._t);
    this.checkpoints = new Checkpoints(this._t);
  }

  /** The unix socket's path or the TCP address this client talks to ("https://host:port" for TLS). */
  get where() {
    return this._t.where;
  }

  /** The daemon's status: {version, uptime_ms, functions, api_version, ...}. */
  status() {
    return this._t.call('GET', '/v1/status');
  }
}

export class Functions {
  constructor(t) {
    this._t = t;
  }

  /** Packs the function directory (packDir) and deploys it; resolves once the new version serves. */
  async deploy(dir) {
    return this.deployBundle(packDir(dir));
  }

  /** Deploys a bundle already packed (a gzip'd tar, at most 64 MiB). */
  deployBundle(bundle) {
    return this._t.call('POST', '/v1/functions', null, { body: bundle, contentType: 'application/gzip' });
  }

  /**
   * Runs the function with event (any JSON value; undefined sends {}) and resolves to
   * {value, raw, requestId, version, child, elapsedMs, serverTiming}. A failed request rejects
   * with an InvokeError (HandlerError with type and traceback, InvokeTimeout, ...).
   */
  async invoke(name, event) {
    const t0 = performance.now();
    const { res, headers } = await this._t.open('POST', fnPath(name, 'invoke'), {
      body: JSON.stringify(event === undefined ? {} : event), contentType: 'application/json',
    });
    const raw = (await readAll(res)).toString().trim();
    return {
      value: raw ? JSON.parse(raw) : null,
      raw,
      requestId: headers['x-zygo-request-id'] ?? '',
      version: headers['x-zygo-version'] ?? '',
      child: headers['x-zygo-child'] ?? '',
      elapsedMs: performance.now() - t0,
      serverTiming: parseServerTiming(headers['server-timing'] ?? ''),
    };
  }

  /**
   * One page of the function's log lines, oldest first: {lines: [{id, stream, line,
   * request_id, at, ...}], next}; pass next as after for the following page.
   */
  logs(name, { requestId, after = 0, limit } = {}) {
    const q = new URLSearchParams({ after: String(after) });
    if (requestId) q.set('request', requestId);
    if (limit !== undefined) q.set('limit', String(limit));
    return this._t.call('GET', `${fnPath(name, 'logs')}?${q}`);
  }

  /** Every deployed function, by name, following the pages. */
  async list({ pageSize } = {}) {
    return collect(paginate(this._t, '/v1/functions', pageSize));
  }

  /** One function's record; NotFound when there is none. */
  get(name) {
    return this._t.call('GET', fnPath(name));
  }

  /** Deletes the function and its versions. */
  async remove(name) {
    await this._t.call('DELETE', fnPath(name));
  }
}

async function collect(it) {
  const out = [];
  for await (const x of it) out.push(x);
  return out;
}

function parseServerTiming(h) {
  return h.split(',').map((p) => p.trim()).filter(Boolean).map((p) => {
    const [name, ...params] = p.split(';');
    const dur = params.map((x) => x.trim()).find((x) => x.startsWith('dur='));
    return { name: name.trim(), ms: dur ? Number(dur.slice(4)) : 0 };
  });
}

/**
 * A running command's output as it comes: iterate it (for await) for {stream, data} chunks;
 * once the iteration ends, exitCode, signal and timedOut hold how it ended. An error after the
 * command started (the sandbox died) throws from the iteration. close() before the end kills
 * the command.
 */
export class ExecStream {
  constructor(res) {
    this._res = res;
    this._events = ndjson(res);
    this.exitCode = null;
    this.signal = 0;
    this.timedOut = false;
  }

  async* [Symbol.asyncIterator]() {
    try {
      for await (const ev of this._events) {
        if (ev.error) throw streamError(ev.error);
        if (ev.exit) {
          this.exitCode = ev.exit.code ?? 0;
          this.signal = ev.exit.signal ?? 0;
          this.timedOut = Boolean(ev.exit.timed_out);
          return;
        }
        if (ev.stream) yield { stream: ev.stream, data: Buffer.from(ev.data ?? '', 'base64') };
      }
      if (this.exitCode === null) throw new ZygoError('the exec answer ended without an exit status', { code: 'internal' });
    } finally {
      this.close();
    }
  }

  /** Reads (and drops) the rest of the output; resolves to the exit code. */
  async wait() {
    for await (const _ of this); // eslint-disable-line no-unused-vars
    return this.exitCode;
  }

  close() {
    this._res.destroy();
  }
}

async function* prefixed(head, rest) {
  yield head;
  for await (const chunk of rest) yield typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
}

export class Files {
  constructor(sb) {
    this._sb = sb;
  }

  /** Writes data (a string is UTF-8) to path with permission bits mode, creating parent directories. */
  async write(path, data, { mode = 0o644 } = {}) {
    const q = new URLSearchParams({ path, mode: (mode & 0o7777).toString(8) });
    await this._sb._t.call('PUT', `${sbPath(this._sb.id, 'files')}?${q}`, null,
      { body: typeof data === 'string' ? data : Buffer.from(data), contentType: 'application/octet-stream' });
  }

  /** The file's content (a Buffer); NotFound when there is none. */
  async read(path) {
    const { res } = await this._sb._t.open('GET', `${sbPath(this._sb.id, 'files')}?${new URLSearchParams({ path })}`);
    return readAll(res);
  }

  /** The directory's entries in name order ({name, size, mode, mod_time, is_dir}); at most 10000. */
  async list(path) {
    return (await this._sb._t.call('GET', `${sbPath(this._sb.id, 'files', 'list')}?${new URLSearchParams({ path })}`)) ?? [];
  }
}

/**
 * A sandbox's record (record, as last read) and the handle to act on it. await using (where
 * the runtime has Symbol.asyncDispose) or sandboxes.use() kill it at the end.
 */
export class Sandbox {
  constructor(t, record) {
    this._t = t;
    this.record = record;
    this.files = new Files(this);
  }

  get id() {
    return this.record.id;
  }

  get name() {
    return this.record.name ?? '';
  }

  /** Reads the record again. */
  async refresh() {
    this.record = await this._t.call('GET', sbPath(this.id));
    return this.record;
  }

  /**
   * Starts argv and resolves to its output as an ExecStream. opts: env (["KEY=VALUE"]), cwd
   * (default /), timeout (seconds: then SIGTERM, SIGKILL 2 s later), stdin (a string or
   * Buffer sent whole, or an async iterable of Buffers — a Readable too — streamed while the
   * command runs; its end closes the command's stdin).
   */
  async execStream(argv, { env, cwd, stdin, timeout } = {}) {
    if (!Array.isArray(argv)) throw new TypeError("argv: an array of strings, e.g. ['sh', '-c', command]");
    const req = { argv };
    if (env?.length) req.env = env;
    if (cwd) req.cwd = cwd;
    if (timeout !== undefined) req.timeout_ms = Math.round(timeout * 1000);
    let body;
    let contentType = 'application/json';
    if (typeof stdin === 'string' || Buffer.isBuffer(stdin) || stdin instanceof Uint8Array) {
      req.stdin = Buffer.from(stdin).toString('base64');
      body = JSON.stringify(req);
    } else if (stdin) {
      req.stdin_stream = true;
      body = prefixed(Buffer.from(JSON.stringify(req) + '\n'), stdin);
      contentType = 'application/octet-stream';
    } else {
      body = JSON.stringify(req);
    }
    const { res } = await this._t.open('POST', sbPath(this.id, 'exec'), { body, contentType });
    return new ExecStream(res);
  }

  /** Runs argv to its end: {exitCode, signal, timedOut, stdout, stderr} (Buffers). */
  async exec(argv, opts = {}) {
    const proc = await this.execStream(argv, opts);
    const out = { stdout: [], stderr: [] };
    for await (const { stream, data } of proc) (out[stream] ?? out.stderr).push(data);
    return {
      exitCode: proc.exitCode, signal: proc.signal, timedOut: proc.timedOut,
      stdout: Buffer.concat(out.stdout), stderr: Buffer.concat(out.stderr),
    };
  }

  /**
   * Runs Python in the sandbox's persistent interpreter: {ok, value, error, stdout, stderr,
   * outputTruncated, restarted}. A Python exception is ok false with its traceback in error.
   */
  async runCode(code, { timeout } = {}) {
    const req = { code };
    if (timeout !== undefined) req.timeout_ms = Math.round(timeout * 1000);
    const { res } = await this._t.open('POST', sbPath(this.id, 'run-code'), { body: JSON.stringify(req), contentType: 'application/json' });
    const out = { stdout: [], stderr: [] };
    for await (const ev of ndjson(res)) {
      if (ev.error) throw streamError(ev.error);
      if (ev.result) {
        const r = ev.result;
        return {
          ok: Boolean(r.ok), value: r.value ?? null, error: r.error ?? null,
          stdout: Buffer.concat(out.stdout).toString(), stderr: Buffer.concat(out.stderr).toString(),
          outputTruncated: Boolean(r.output_truncated), restarted: Boolean(r.restarted),
        };
      }
      if (ev.stream) (out[ev.stream] ?? out.stderr).push(Buffer.from(ev.data ?? '', 'base64'));
    }
    throw new ZygoError('the run-code answer ended without a result', { code: 'internal' });
  }

  /** Saves an image of the running sandbox (which keeps running); resolves to the checkpoint record. */
  checkpoint(tag) {
    return this._t.call('POST', sbPath(this.id, 'checkpoint'), tag ? { tag } : {});
  }

  /** The checkpoints taken of this sandbox, oldest first. */
  checkpoints({ pageSize } = {}) {
    return collect(paginate(this._t, sbPath(this.id, 'checkpoints'), pageSize));
  }

  /**
   * Makes n independent copies restored in parallel from fromCheckpoint (an id, tag or record)
   * or a fresh checkpoint. Resolves to a ForkResult even when some children failed; rejects
   * when the fork was refused (bad n: BadRequest) or every child failed (err.answer lists them).
   * opts.names names the children (exactly n distinct names, names[i] for child i; a bad one is
   * BadRequest naming names[i], one in use Conflict; nothing is made).
   */
  async fork(n, fromCheckpoint, opts = {}) {
    const req = { n };
    if (fromCheckpoint !== undefined && fromCheckpoint !== null) req.from = cpRef(fromCheckpoint);
    if (opts.names) req.names = [...opts.names];
    const ans = await this._t.call('POST', sbPath(this.id, 'fork'), req);
    const children = (ans.children ?? []).map((ch, i) => ({
      index: ch.index ?? i,
      sandbox: ch.sandbox ? new Sandbox(this._t, ch.sandbox) : null,
      error: ch.error ? streamError(ch.error) : null,
    }));
    return new ForkResult(ans.checkpoint ?? {}, children);
  }

  /** Replaces the running copy with a restore of checkpoint (id, tag or record); updates record. */
  async rollback(checkpoint) {
    this.record = await this._t.call('POST', sbPath(this.id, 'rollback'), { to: cpRef(checkpoint) });
  }

  /** The sandbox's generation now (32 hex digits; new on every fork and rollback). */
  async generation() {
    return (await this._t.call('GET', sbPath(this.id, 'generation'))).generation;
  }

  /** Destroys the sandbox; its checkpoints stay. */
  async kill() {
    await this._t.call('DELETE', sbPath(this.id));
  }

  /** kill(), except that a sandbox already gone is not an error. */
  async dispose() {
    try {
      await this.kill();
    } catch (err) {
      if (!(err instanceof NotFound)) throw err;
    }
  }
}

if (Symbol.asyncDispose) Sandbox.prototype[Symbol.asyncDispose] = Sandbox.prototype.dispose;

/** A fork's children in order ({index, sandbox, error}) and the checkpoint they were restored from. */
export class ForkResult {
  constructor(checkpoint, children) {
    this.checkpoint = checkpoint;
    this.children = children;
  }

  /** The children that run. */
  get sandboxes() {
    return this.children.filter((c) => c.sandbox).map((c) => c.sandbox);
  }

  /** Kills the children that run. */
  async dispose() {
    await Promise.all(this.sandboxes.map((sb) => sb.dispose()));
  }
}

if (Symbol.asyncDispose) ForkResult.prototype[Symbol.asyncDispose] = ForkResult.prototype.dispose;

export class Sandboxes {
  constructor(t) {
    this._t = t;
  }

  /**
   * Starts a sandbox; resolves once its guest answers. opts (all optional): name, rootfs_dir,
   * services, env, secrets, memory_mib, pids, cpus, network ({mode, allow, deny}); the API's
   * field names (camelCase accepted too). A bad value rejects with BadRequest naming the field.
   */
  async create(opts = {}) {
    const body = {};
    for (const [k, v] of Object.entries(opts)) {
      if (v !== undefined && v !== null) body[k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = v;
    }
    return new Sandbox(this._t, await this._t.call('POST', '/v1/sandboxes', body));
  }

  /** Creates a sandbox, calls fn(sandbox), and kills it however fn ends; resolves to fn's value. */
  async use(opts, fn) {
    const sb = await this.create(opts);
    try {
      return await fn(sb);
    } finally {
      await sb.dispose();
    }
  }

  /** The sandbox with that id or name; NotFound when there is none. */
  async get(idOrName) {
    return new Sandbox(this._t, await this._t.call('GET', sbPath(idOrName)));
  }

  /** Every sandbox, oldest first, following the pages. */
  async list({ pageSize } = {}) {
    return (await collect(paginate(this._t, '/v1/sandboxes', pageSize))).map((r) => new Sandbox(this._t, r));
  }
}

export class Checkpoints {
  constructor(t) {
    this._t = t;
  }

  /** Checkpoints, oldest first: every one, or those of sandbox (id or name). */
  list({ sandbox, pageSize } = {}) {
    return collect(paginate(this._t, '/v1/checkpoints', pageSize, sandbox ? { sandbox } : {}));
  }

  /** The checkpoint with that id or tag. */
  get(checkpoint) {
    return this._t.call('GET', `/v1/checkpoints/${enc(checkpoint)}`);
  }

  /** Deletes a checkpoint; FailedPrecondition while a sandbox or checkpoint refers to it. */
  async remove(checkpoint) {
    await this._t.call('DELETE', `/v1/checkpoints/${enc(cpRef(checkpoint))}`);
  }
}
