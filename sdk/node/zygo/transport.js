// HTTP to the daemon over its unix socket or TCP (node:http, node:https), no dependencies.
//
// One connection per call (agent: false), so nothing stays open between calls and a client
// needs no closing. Every answer's Zygo-Api-Version is checked first; a non-2xx answer becomes
// the error of its body (errors.fromBody).

import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import readline from 'node:readline';
import {
  API_VERSION, ApiVersionMismatch, CertificateError, ConfigError, HTTPError, Unreachable, ZygoError, fromBody,
} from './errors.js';

const MAX_ERROR_BODY = 1 << 20;

// The codes of node:tls for a certificate that does not verify, and for one that is not for the name.
const CERT_UNTRUSTED = new Set(['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_UNTRUSTED', 'CERT_SIGNATURE_FAILURE',
  'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);
const CERT_NAME = 'ERR_TLS_CERT_ALTNAME_INVALID';

export class Transport {
  /**
   * Calls to the daemon target (context.js resolveTarget): its unix socket, or TCP to its
   * address, TLS checked against its CA file (else the system's roots) and server name,
   * with its token as a bearer token. Throws ConfigError when the CA file cannot be read.
   */
  constructor(target) {
    this.target = target;
    this.socketPath = target.socketPath;
    this.addr = target.addr || undefined;
    this.token = target.token || null;
    if (this.addr) {
      this.tls = target.tls;
      this.host = target.host;
      this.port = target.port;
      this.hostport = target.addr;
      if (this.tls && target.ca) {
        try {
          this.ca = fs.readFileSync(target.ca);
        } catch (err) {
          throw new ConfigError(`${target.caFrom}: the CA file ${target.ca}: ${err.message}`);
        }
      }
    }
  }

  /** The socket's path or the TCP address ("https://host:port" for TLS), for messages. */
  get where() {
    if (!this.addr) return this.socketPath;
    return this.tls ? `https://${this.addr}` : this.addr;
  }

  unreachable(err) {
    if (this.tls && (CERT_UNTRUSTED.has(err.code) || err.code === CERT_NAME)) return this.certificateError(err);
    const msg = this.addr
      ? `no Zygo daemon answered at ${this.where} (is \`zygo serve --listen ${this.hostport}\` running, and is the address right?): ${err.message}`
      : `no Zygo daemon answered on ${this.socketPath} (is \`zygo serve\` running with the same --state-dir?): ${err.message}`;
    const e = new Unreachable(msg, this.where);
    e.cause = err;
    return e;
  }

  certificateError(err) {
    const file = this.target.contextPath ?? 'the context file';
    const hint = err.code === CERT_NAME
      ? `the daemon's certificate is not for ${this.target.serverName || this.host}: connect by a name it holds, `
        + `or set serverName (the option, or server_name in ${file})`
      : 'the daemon\'s certificate is not signed by a CA this client trusts: give its CA (or the certificate itself, '
        + `if self-signed) with the option ca, $ZYGO_CA or ca in ${file}`;
    const e = new CertificateError(`the TLS handshake with ${this.where} failed: ${err.message}\n${hint}`, this.where);
    e.cause = err;
    return e;
  }

  // The unix socket must belong to root or this user: a socket another user put in a state
  // directory they can change receives no call. (Node cannot read the peer's credentials
  // as the Go and Python clients do; the socket file's owner stands for them.)
  checkSocketOwner() {
    const st = fs.statSync(this.socketPath);
    const me = typeof process.geteuid === 'function' ? process.geteuid() : null;
    if (me !== null && st.uid !== 0 && st.uid !== me) {
      throw new Error(`${this.socketPath} belongs to uid ${st.uid}, neither root nor this user: refusing to talk to it`);
    }
  }

  /**
   * Sends one call and resolves to its 2xx answer, the body unread ({status, headers, res}).
   * body is a Buffer/string, or an async iterable of Buffers streamed while the answer is
   * read (the answer may begin before the body ends). Rejects with the error of an error
   * answer, ApiVersionMismatch, or Unreachable.
   */
  async open(method, path, { body = null, contentType = null, headers = {} } = {}) {
    const h = { 'accept-encoding': 'identity', ...headers };
    if (contentType) h['content-type'] = contentType;
    if (this.token) h.authorization = `Bearer ${this.token}`;
    const streamed = body !== null && typeof body !== 'string' && !Buffer.isBuffer(body);
    if (body !== null && !streamed) h['content-length'] = Buffer.byteLength(body);
    const opts = { method, path, headers: h, agent: false };
    let mod = http;
    if (this.addr) {
      Object.assign(opts, { host: this.host, port: this.port });
      if (this.tls) {
        mod = https;
        if (this.ca) opts.ca = this.ca;
        if (this.target.serverName) opts.servername = this.target.serverName;
      }
    } else {
      try {
        this.checkSocketOwner();
      } catch (err) {
        throw this.unreachable(err);
      }
      opts.socketPath = this.socketPath;
    }
    const res = await new Promise((resolve, reject) => {
      const req = mod.request(opts, resolve);
      req.on('error', (err) => reject(this.unreachable(err)));
      if (!streamed) {
        req.end(body ?? undefined);
        return;
      }
      (async () => {
        for await (const chunk of body) {
          if (req.destroyed) return;
          if (!req.write(chunk)) await drained(req);
        }
        req.end();
      })().catch(() => req.destroy());
    });
    const answer = { status: res.statusCode, headers: res.headers, res };
    const got = res.headers['zygo-api-version'];
    if (got !== undefined && String(got).trim() !== String(API_VERSION)) {
      res.destroy();
      throw new ApiVersionMismatch(String(got).trim());
    }
    if (res.statusCode >= 300) throw await readError(answer);
    return answer;
  }

  /** Sends payload as JSON (or body as it is) and resolves to the decoded answer, or null when empty. */
  async call(method, path, payload, { body = null, contentType = null } = {}) {
    if (payload !== undefined && payload !== null) {
      body = JSON.stringify(payload);
      contentType = 'application/json';
    }
    const { res } = await this.open(method, path, { body, contentType });
    const raw = await readAll(res);
    return raw.length && raw.toString().trim() ? JSON.parse(raw) : null;
  }
}

// drained resolves when req can take more (or has closed), leaving no listener behind.
function drained(req) {
  return new Promise((resolve) => {
    const done = () => {
      req.off('drain', done).off('close', done);
      resolve();
    };
    req.on('drain', done).on('close', done);
  });
}

/** The whole body of res, as a Buffer (at most limit bytes; the rest is dropped). */
export async function readAll(res, limit = Infinity) {
  const parts = [];
  let n = 0;
  for await (const chunk of res) {
    if (n < limit) parts.push(chunk);
    n += chunk.length;
  }
  return Buffer.concat(parts).subarray(0, limit);
}

/** Yields each line of an NDJSON body, decoded. */
export async function* ndjson(res) {
  const rl = readline.createInterface({ input: res, crlfDelay: Infinity });
  try {
    for await (const line of rl) {
      if (line.trim()) yield JSON.parse(line);
    }
  } finally {
    rl.close();
    res.destroy();
  }
}

async function readError({ status, headers, res }) {
  const raw = await readAll(res, MAX_ERROR_BODY);
  let answer;
  try {
    answer = JSON.parse(raw);
  } catch {
    answer = null;
  }
  const body = answer?.error;
  if (!body || typeof body !== 'object' || !body.code) {
    return new HTTPError(`HTTP ${status}: ${raw.toString().trim().slice(0, 512)}`, { status, headers });
  }
  const err = fromBody(status, body, headers);
  err.answer = answer;
  return err;
}

/**
 * Yields every item of a paginated list route ({"items": [...], "next_cursor": "..."}),
 * following next_cursor; pageSize is each page's ?limit= (1..1000; undefined: the daemon's default).
 */
export async function* paginate(t, path, pageSize, query = {}) {
  const q = new URLSearchParams(query);
  if (pageSize !== undefined) q.set('limit', String(pageSize));
  for (;;) {
    const qs = q.toString();
    const page = await t.call('GET', qs ? `${path}?${qs}` : path);
    if (!Array.isArray(page?.items)) {
      throw new ZygoError(`the daemon's answer to GET ${path} is not a page of items (is the daemon older than this client?)`,
        { status: 200, code: 'http' });
    }
    yield* page.items;
    if (!page.next_cursor) return;
    q.set('cursor', page.next_cursor);
  }
}

/** The state directory a daemon uses when given none: /var/lib/zygo for root, else $XDG_STATE_HOME/zygo, else ~/.local/state/zygo. */
export function defaultStateDir() {
  if (typeof process.geteuid === 'function' && process.geteuid() === 0) return '/var/lib/zygo';
  if (process.env.XDG_STATE_HOME) return `${process.env.XDG_STATE_HOME}/zygo`;
  return `${os.homedir()}/.local/state/zygo`;
}
