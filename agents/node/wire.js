'use strict';
// The worker's channel to the supervisor: fd 3, an AF_UNIX SOCK_STREAM socket carrying
// newline-delimited JSON, one object with a string "type" per line, at most 64 KiB per line
// (newline included). See "The worker protocol (Node)" in docs/protocol.md.
//
// The worker sends only before it starts reading (ready, import_error), so sends are
// synchronous writes on the raw fd; reading (waiting for go) goes through a net.Socket so that
// the event loop keeps running import-time timers meanwhile. Node calls libuv's
// uv_disable_stdio_inheritance() at start-up, which marks fds 0 to 15 close-on-exec, so
// processes spawned by user code do not inherit fd 3 unless it is passed on purpose
// (stdio: [.., 3]); the supervisor takes messages only from the worker itself (its pid in
// SCM_CREDENTIALS, docs/protocol.md "Channels").

// Functions that first run after go are parenthesized expressions, `const f = (function f()
// {...});`, marked `// EAGER`: V8 compiles a parenthesized function when it compiles the module
// (its heuristic for functions invoked at once), where it compiles a declaration on its first
// call, which after go put that compilation on the request path.

const fs = require('fs');
const net = require('net');
const { StringDecoder } = require('string_decoder');
const { log } = require('./agentlog');
const { cutHead, cutTail } = require('./errors');

const CONTROL_FD = 3;
const MAX_LINE = 64 * 1024;
const SEND_TIMEOUT_MS = 10000;

/** Return true if descriptor `fd` (default 3) is open and is a socket. Never throws. */
function controlFdIsSocket(fd = CONTROL_FD) {
  try {
    return fs.fstatSync(fd).isSocket();
  } catch {
    return false;
  }
}

/**
 * Return `msg` as one JSON line (with its newline) of at most MAX_LINE bytes. When a message
 * carrying an `error` object is too long, its traceback and then its message are cut until it
 * fits. Throws RangeError if the line still does not fit, TypeError if `msg` is not JSON.
 */
function encode(msg) {
  let line = JSON.stringify(msg) + '\n';
  if (Buffer.byteLength(line) <= MAX_LINE) return line;
  if (msg.error && typeof msg.error === 'object') {
    const note = '[cut to fit the 64 KiB line limit]';
    const e = msg.error;
    for (const error of [
      { ...e, traceback: cutTail(String(e.traceback || ''), 8192) },
      { ...e, traceback: note },
      { ...e, traceback: note, message: cutHead(String(e.message || ''), 1024) },
    ]) {
      line = JSON.stringify({ ...msg, error }) + '\n';
      if (Buffer.byteLength(line) <= MAX_LINE) return line;
    }
  }
  throw new RangeError(`${msg.type} message is ${Buffer.byteLength(line)} bytes, over 64 KiB`);
}

/**
 * Write `msg` on fd 3, blocking until the whole line is written (retrying on EAGAIN for up to
 * 10 s). Returns nothing; throws the write error (EPIPE when the supervisor closed its end,
 * EAGAIN after the timeout) or encode's errors.
 */
function sendSync(msg) {
  const data = Buffer.from(encode(msg));
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const giveUp = Date.now() + SEND_TIMEOUT_MS;
  let off = 0;
  while (off < data.length) {
    try {
      off += fs.writeSync(CONTROL_FD, data, off, data.length - off);
    } catch (err) {
      if (err.code !== 'EAGAIN' || Date.now() > giveUp) throw err;
      Atomics.wait(pause, 0, 0, 2); // the socket is non-blocking and full: wait 2 ms
    }
  }
}

// Set by closeControl (one control socket per worker): the reader delivers no more lines, and
// the socket's end is ours, not the supervisor's.
let stopped = false;

/**
 * Return feed(chunk) for the bytes read from fd 3: it splits them into lines and calls
 * onMessage(obj) for every line that is a JSON object with a string `type`, in order; lines
 * that are not, or exceed 64 KiB, are logged and skipped. A chunk is decoded before feed
 * returns (the caller may reuse its memory); a line may span chunks. No line is delivered
 * once done() returns true.
 */
function lineReader(onMessage, done) {
  const decoder = new StringDecoder('utf8');
  let pending = '';
  let discarding = false; // inside a line that went over MAX_LINE
  return function feed(chunk) {
    pending += decoder.write(chunk);
    let nl;
    while (!done() && (nl = pending.indexOf('\n')) !== -1) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (discarding) {
        discarding = false;
        continue;
      }
      const msg = parseLine(line);
      if (msg) onMessage(msg);
    }
    if (Buffer.byteLength(pending) >= MAX_LINE) {
      log('control socket: line over 64 KiB skipped');
      pending = '';
      discarding = true;
    }
  };
}

/**
 * Start reading fd 3. Calls onMessage(obj) for every line that is a JSON object with a string
 * `type`, in order; lines that are not, or exceed 64 KiB, are logged and skipped. Calls
 * onClose() once when the peer closes the socket or it fails (not after closeControl).
 * Returns the net.Socket, which keeps the event loop alive until closeControl. Throws if fd 3
 * cannot be wrapped.
 *
 * The socket reads into one buffer of its own (net.Socket's `onread`): what arrives is handed
 * to the line reader directly, not through the readable stream's machinery, whose first run
 * on `go` cost most of the time between the message's arrival and the worker's first step.
 */
function receive(onMessage, onClose) {
  let closed = false;
  const close = () => {
    if (!closed && !stopped) {
      closed = true;
      onClose();
    }
  };
  const feed = lineReader(onMessage, () => closed || stopped);
  const sock = new net.Socket({
    fd: CONTROL_FD,
    readable: true,
    writable: true,
    onread: {
      buffer: Buffer.alloc(MAX_LINE),
      // true: never pause. After go, closeControl has closed the handle under this call,
      // and a pause would ask the closed handle to stop reading (an EINVAL 'error').
      callback: (n, buf) => {
        feed(buf.subarray(0, n));
        return true;
      },
    },
  });
  sock.on('error', (err) => {
    log(`control socket: ${err.message}`);
    close();
  });
  sock.on('end', close);
  sock.on('close', close);
  return sock;
}

/** Return the message in `line`, or null (logged) if it is not a JSON object with a type. */
function parseLine(line) {
  if (Buffer.byteLength(line) + 1 > MAX_LINE) {
    log('control socket: line over 64 KiB skipped');
    return null;
  }
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (err) {
    log(`control socket: line is not JSON: ${err.message}`);
    return null;
  }
  if (msg === null || typeof msg !== 'object' || Array.isArray(msg) ||
      typeof msg.type !== 'string') {
    log('control socket: line is not a JSON object with a string "type"');
    return null;
  }
  return msg;
}

/**
 * Close `sock` (from receive) and make sure fd 3 is closed. The socket's libuv handle is closed
 * directly: uv_close stops reading and closes the fd synchronously, and none of the stream's
 * JavaScript runs (destroy() would run its teardown and, through `this !== process.stderr` in
 * net's _destroy, build process.stderr: most of this step's time when it did). The reader
 * delivers no line after this, and the socket's listeners are never called again (the
 * handle's close callback calls none). fd 3 is closed by hand only if it is still a socket
 * right after (nothing opens a file in between, so it cannot be someone else's fd). Returns
 * nothing; throws if fd 3 is still open afterwards.
 */
// EAGER
const closeControl = (function closeControl(sock) {
  stopped = true;
  const handle = sock._handle;
  if (handle && typeof handle.close === 'function') {
    sock._handle = null;
    handle.close();
  } else {
    sock.on('error', () => {}); // nothing more is read: late errors do not matter
    sock.destroy();
  }
  if (controlFdIsSocket()) {
    fs.closeSync(CONTROL_FD);
    if (controlFdIsSocket()) throw new Error('fd 3 is still a socket after closing it');
  }
});

module.exports = {
  CONTROL_FD, MAX_LINE, controlFdIsSocket, encode, sendSync, receive, lineReader, parseLine,
  closeControl,
};
