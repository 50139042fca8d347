'use strict';
// Warm-up checks, reported in `ready` as {name, level, detail, ...extra}; level is "info" or
// "warn", detail one human-readable line (at most 2048 characters), extra keys carry the
// structured findings. Checks only observe.
//
//   handles    what import-time code left open on the event loop: sockets, servers, child
//              processes, watchers (named, from process._getActiveHandles()) and timers
//              (counted, from process.getActiveResourcesInfo()). "warn" when a socket, server
//              or child process is open.
//   libcrypto  the OpenSSL version (process.versions.openssl); always "info".
//
// Not checked: whether Math.random or crypto were used at import. It cannot be seen from
// JavaScript and does not matter here: each worker is a fresh process that serves one
// request, so V8's Math.random state, its string-hash seed and OpenSSL's DRBG are seeded at
// the worker's own start and never shared with another request (case BH-07).

const MAX_ITEMS = 64;
const MAX_DETAIL = 2048;

/** Run every check and return the `checks` list. Never throws: a failing check is a "warn". */
function run() {
  return [['handles', checkHandles], ['libcrypto', checkLibcrypto]].map(([name, check]) => {
    try {
      return check();
    } catch (err) {
      return result(name, 'warn', `the check failed: ${err && err.message}`);
    }
  });
}

/** `handles`: the handles and timers import-time code left open (see the module doc). */
function checkHandles() {
  const handles = process._getActiveHandles();
  const owned = new Set(); // stdio of the child processes listed on their own
  for (const h of handles) {
    if (h && h.constructor && h.constructor.name === 'ChildProcess' && Array.isArray(h.stdio)) {
      h.stdio.forEach((s) => s && owned.add(s));
    }
  }
  const items = handles.filter((h) => !owned.has(h) && !isStdio(h)).map(describeHandle);
  const timers = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  if (timers) items.push({ kind: 'timers', count: timers });
  if (items.length === 0) return result('handles', 'info', 'no handles open at import', { items });
  const risky = items.some((i) => ['socket', 'server', 'child_process'].includes(i.kind));
  const names = items.map(nameOf).join(', ');
  const detail = `open at import: ${names}; the worker keeps them while it waits for its ` +
    'request (a peer may close an idle connection; a server gets no traffic; a timer may fire ' +
    'during the request, and an error it throws becomes the request\'s error)';
  return result('handles', risky ? 'warn' : 'info', detail, { items: items.slice(0, MAX_ITEMS) });
}

/** `libcrypto`: the OpenSSL version Node uses. */
function checkLibcrypto() {
  const version = process.versions.openssl || 'none';
  return result('libcrypto', 'info', `OpenSSL ${version}; each worker is a fresh process, ` +
    'so its random generator is seeded from the OS at start, never shared', { version });
}

function isStdio(h) {
  return h && (h.fd === 0 || h.fd === 1 || h.fd === 2);
}

/** Return a JSON-safe description {kind, ...} of one handle. */
function describeHandle(h) {
  const kind = (h && h.constructor && h.constructor.name) || typeof h;
  const inner = h && h._handle && h._handle.constructor ? h._handle.constructor.name : '';
  if (kind === 'Socket') {
    const unix = inner === 'Pipe';
    return {
      kind: 'socket', transport: unix ? 'unix' : 'tcp',
      local: unix ? str(h._pipeName || '') : addr(h.localAddress, h.localPort),
      peer: unix ? null : addr(h.remoteAddress, h.remotePort),
    };
  }
  if (kind === 'Server') {
    let where = null;
    try {
      const a = h.address();
      where = typeof a === 'string' ? a : a && addr(a.address, a.port);
    } catch {
      // not listening yet
    }
    return { kind: 'server', transport: inner === 'Pipe' ? 'unix' : 'tcp', address: where };
  }
  if (kind === 'ChildProcess') return { kind: 'child_process', pid: h.pid, file: str(h.spawnfile) };
  return { kind: kind === 'FSWatcher' || kind === 'StatWatcher' ? 'watcher' : kind };
}

function nameOf(i) {
  switch (i.kind) {
    case 'socket': return `socket ${i.transport} ${i.local || '?'}${i.peer ? ' -> ' + i.peer : ''}`;
    case 'server': return `server ${i.transport} ${i.address || '(not listening)'}`;
    case 'child_process': return `child process ${i.file} (pid ${i.pid})`;
    case 'timers': return `${i.count} timer(s)`;
    default: return i.kind;
  }
}

function addr(host, port) {
  if (host === undefined || host === null) return null;
  return String(host).includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function str(v) {
  return v === undefined || v === null ? null : String(v);
}

function result(name, level, detail, extra = {}) {
  return { name, level, detail: detail.slice(0, MAX_DETAIL), ...extra };
}

module.exports = { run, checkHandles, checkLibcrypto };
