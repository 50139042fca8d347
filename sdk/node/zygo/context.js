// Where the client finds the daemon: the zygo CLI's rules (internal/cli/context.go).
//
// Each setting comes from the first of: the option, an environment variable, the context
// file, a default:
//
//   address      addr         $ZYGO_ADDR   address       the unix socket of the state dir
//                (socketPath, a unix socket's path, stands for addr)
//   token        token        $ZYGO_TOKEN  token         api.token in the state dir, if readable
//   CA file      ca           $ZYGO_CA     ca            the system's roots
//   server name  serverName   -            server_name   the address's host
//
// The context file is $XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml; a
// missing file is no error, a key it does not know is, and so is a file holding a token that
// group or others may read. Its token and server name go only to its own address, never to
// one given by option or $ZYGO_ADDR. An address is host:port (plain HTTP, for a loopback
// daemon; TLS when a CA or server name is set), https://host:port (TLS) or http://host:port.
//
// Node has no TOML parser and this package has no dependencies, so parseContext reads the
// little the file may hold, strictly: `key = "basic string"` or `key = 'literal string'`
// lines, comments and blank lines; anything else is an error naming its line.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError } from './errors.js';

/** The keys a context file may hold. */
export const CONTEXT_KEYS = ['address', 'token', 'ca', 'server_name'];

/** The context file's path; null when neither $XDG_CONFIG_HOME nor the home directory is known. */
export function contextPath() {
  if (process.env.XDG_CONFIG_HOME) return path.join(process.env.XDG_CONFIG_HOME, 'zygo', 'config.toml');
  const home = os.homedir();
  return home ? path.join(home, '.config', 'zygo', 'config.toml') : null;
}

const ESCAPES = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };

// parseValue reads the string at the start of s (a TOML basic or literal string, on one
// line) and returns [value, the rest of s]; throws a message (a string) when s holds none.
function parseValue(s) {
  if (s.startsWith("'")) {
    const end = s.indexOf("'", 1);
    if (end < 0) throw 'an unterminated string';
    return [s.slice(1, end), s.slice(end + 1)];
  }
  if (!s.startsWith('"')) throw 'want key = "string" (the context file holds strings only)';
  let out = '';
  for (let i = 1; i < s.length; i++) {
    const c = s[i];
    if (c === '"') return [out, s.slice(i + 1)];
    if (c.charCodeAt(0) < 0x20 && c !== '\t') throw 'a control character in a string';
    if (c !== '\\') {
      out += c;
      continue;
    }
    const e = s[++i];
    if (e in ESCAPES) {
      out += ESCAPES[e];
    } else if (e === 'u' || e === 'U') {
      const n = e === 'u' ? 4 : 8;
      const hex = s.slice(i + 1, i + 1 + n);
      if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(hex)) throw `a bad \\${e} escape`;
      const cp = parseInt(hex, 16);
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw `a bad \\${e} escape`;
      out += String.fromCodePoint(cp);
      i += n;
    } else {
      throw `a bad escape \\${e ?? ''}`;
    }
  }
  throw 'an unterminated string';
}

/**
 * The context file's text as {key: value}: each line blank, a comment, or
 * `key = "string"` (a comment may follow). Throws ConfigError naming file and line for
 * anything else, a key set twice, or a key it does not know.
 */
export function parseContext(text, file) {
  const out = {};
  text.replace(/^\uFEFF/, '').split(/\r?\n/).forEach((raw, i) => {
    const where = `the context file ${file}, line ${i + 1}`;
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const m = /^([A-Za-z0-9_-]+)[ \t]*=[ \t]*(.*)$/.exec(line);
    if (!m) throw new ConfigError(`${where}: want key = "string" (the context file holds only those, comments and blank lines)`);
    const [, key, rest] = m;
    if (!CONTEXT_KEYS.includes(key)) {
      throw new ConfigError(`the context file ${file}: unknown key '${key}' (known: ${CONTEXT_KEYS.join(', ')})`);
    }
    if (key in out) throw new ConfigError(`${where}: ${key} is set twice`);
    let value;
    let tail;
    try {
      [value, tail] = parseValue(rest);
    } catch (msg) {
      throw new ConfigError(`${where}: ${key}: ${msg}`);
    }
    tail = tail.trim();
    if (tail !== '' && !tail.startsWith('#')) throw new ConfigError(`${where}: ${key}: text after the string`);
    out[key] = value;
  });
  return out;
}

/**
 * The context file at file as {key: value} ({} when it does not exist), its ca made
 * absolute (relative to the file). Throws ConfigError naming the file: it does not parse,
 * holds an unknown key, or holds a token and group or others may read it (not on Windows).
 */
export function loadContext(file) {
  if (!file) return {};
  let text;
  let mode;
  try {
    const fd = fs.openSync(file, 'r');
    try {
      mode = fs.fstatSync(fd).mode & 0o777;
      text = fs.readFileSync(fd, 'utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch (err) {
    if (err.code === 'ENOENT') return {};
    throw new ConfigError(`reading the context file ${file}: ${err.message}`);
  }
  const cf = parseContext(text, file);
  if (cf.token && process.platform !== 'win32' && (mode & 0o077)) {
    throw new ConfigError(`the context file ${file} holds a token and has mode ${mode.toString(8)}: chmod 600 it`);
  }
  if (cf.ca && !path.isAbsolute(cf.ca)) cf.ca = path.join(path.dirname(file), cf.ca);
  return cf;
}

// first returns the first [value, where] of pairs whose value is non-empty; ['', ''] when none.
function first(...pairs) {
  return pairs.find(([v]) => v) ?? ['', ''];
}

/**
 * Splits the scheme off addr and returns {hostport, host, port, tls}: https:// is TLS,
 * http:// plain, none TLS when tlsAsked (a CA or server name is set). Throws ConfigError
 * naming where (the option, the variable or the file) the address came from.
 */
export function parseAddr(addr, where, tlsAsked) {
  let rest = addr;
  const https = rest.startsWith('https://');
  if (https) rest = rest.slice('https://'.length);
  const plain = rest.startsWith('http://');
  if (plain) rest = rest.slice('http://'.length);
  if (rest.includes('://')) throw new ConfigError(`${where} '${addr}': want host:port, https://host:port or http://host:port`);
  rest = rest.replace(/\/+$/, '');
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+):(\d+)$/.exec(rest);
  if (!m || Number(m[2]) > 65535) {
    throw new ConfigError(`${where} '${addr}': want host:port (a port of 0..65535; an IPv6 host in brackets)`);
  }
  return { hostport: rest, host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]), tls: https || (!plain && tlsAsked) };
}

/**
 * The daemon to talk to, from the options, the environment and the context file (see the
 * top of this file): {socketPath} for the unix socket, else {addr (host:port), host, port,
 * tls, ca, caFrom, serverName, token, tokenFrom, addrFrom}; contextPath either way. stateDir
 * is already resolved. Throws ConfigError for a bad context file or address.
 */
export function resolveTarget({ stateDir, socketPath, addr, token, ca, serverName }) {
  const file = contextPath();
  const cf = loadContext(file);
  if (socketPath && !addr) return { socketPath, contextPath: file }; // an explicit socket is an explicit address
  const t = { contextPath: file };
  [t.addr, t.addrFrom] = first([addr, 'addr'], [process.env.ZYGO_ADDR, '$ZYGO_ADDR'], [cf.address, String(file)]);
  [t.ca, t.caFrom] = first([ca, 'ca'], [process.env.ZYGO_CA, '$ZYGO_CA'], [cf.ca, String(file)]);
  // The file's token and server name belong to its address: one given by option or
  // environment never receives them (a token is sent only where it was meant to go).
  let ctxToken = '';
  t.serverName = serverName || '';
  if (cf.address && (t.addrFrom === String(file) || t.addr === cf.address)) {
    ctxToken = cf.token || '';
    t.serverName ||= cf.server_name || '';
  }
  if (!t.addr) return { socketPath: path.join(stateDir, 'zygo.sock'), contextPath: file };
  const where = t.addrFrom === 'addr' ? 'the option addr' : t.addrFrom;
  Object.assign(t, parseAddr(t.addr, where, Boolean(t.ca || t.serverName)));
  [t.token, t.tokenFrom] = first([token, 'token'], [process.env.ZYGO_TOKEN?.trim(), '$ZYGO_TOKEN'], [ctxToken, String(file)]);
  if (!t.token) {
    const tf = path.join(stateDir, 'api.token');
    try {
      t.token = fs.readFileSync(tf, 'utf8').trim();
      t.tokenFrom = t.token ? tf : '';
    } catch {
      t.token = '';
    }
  }
  t.addr = t.hostport;
  return t;
}
