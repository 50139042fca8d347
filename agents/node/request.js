'use strict';
// The one request a worker serves, from `go` to result.json (the last section of
// docs/protocol.md). zygo_worker.js owns the order and the exit; this module owns the steps:
//
//   parseGo       validate the go message
//   prepare       before user code: close fd 3; make fds 1 and 2 dir/stdout and
//                 dir/stderr; TMPDIR=dir/tmp; read dir/event.json
//   makeContext   the handler's second argument
//   encodeOutcome the result's JSON text, in the Python agent's shape
//   writeResult   dir/result.json, atomically
//   lap, withSteps the worker's own timing of its steps after go (result.json "steps")

// Functions that first run after go are parenthesized expressions, `const f = (function f()
// {...});`, marked `// EAGER`: V8 compiles a parenthesized function when it compiles the module
// (its heuristic for functions invoked at once), where it compiles a declaration on its first
// call, which after go put that compilation on the request path.

const fs = require('fs');
const path = require('path');
const wire = require('./wire');
const { describe, error } = require('./errors');

const { O_WRONLY, O_CREAT, O_TRUNC, O_APPEND, O_NOFOLLOW } = fs.constants;
// fs.openSync adds O_CLOEXEC itself (libuv), so processes the handler spawns do not inherit.
const LOG_FLAGS = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW;
const RESULT_FLAGS = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW;

// The worker's timing of its steps after go, [name, nanoseconds], sent in result.json as
// "steps" for the supervisor's profile (docs/protocol.md; names from the Python agent's, which
// the supervisor passes on as child.NAME); at most MAX_STEPS.
const MAX_STEPS = 24;
const steps = [];
let lapAt = process.hrtime.bigint();

/** Start the timing at go. */
function startLaps() {
  steps.length = 0;
  lapAt = process.hrtime.bigint();
}

/** Record the time since the previous lap (or go) as step `name`. */
function lap(name) {
  const now = process.hrtime.bigint();
  if (steps.length < MAX_STEPS) steps.push([name, Number(now - lapAt)]);
  lapAt = now;
}

/**
 * Return the result object's JSON `text` (from encodeOutcome: always an object) with
 * "steps" added, the laps so far.
 */
function withSteps(text) {
  return text.slice(0, -1) + ',"steps":' + JSON.stringify(steps) + '}';
}

/** JSON.parse refused the event (`cause`): the caller's error, reported as "rejected". */
class EventRejected extends Error {
  constructor(cause) {
    super(`event: Node's JSON parser refused it: ${describe(cause).type}: ${describe(cause).message}`);
    this.cause = cause;
  }
}

/** A step before user code failed; `step` names it, `cause` is what it threw. */
class StepFailed extends Error {
  constructor(step, cause) {
    super(`${step}: ${describe(cause).type}: ${describe(cause).message}`);
    this.step = step;
    this.cause = cause;
  }
}

/**
 * Return {requestId, dir, deadline, function, version} from a go message; `deadline` is in
 * epoch milliseconds (now + deadline_ms). Throws TypeError naming the bad field: request_id
 * must be a string, dir an absolute path, deadline_ms a non-negative integer; function and
 * version are optional strings ("" when absent).
 */
function parseGo(msg, now = Date.now()) {
  const field = (name, ok, want) => {
    if (!ok(msg[name])) {
      throw new TypeError(`go: ${name} must be ${want}, got ${JSON.stringify(msg[name])}`);
    }
    return msg[name];
  };
  const optional = (v) => v === undefined || v === null || typeof v === 'string';
  return {
    requestId: field('request_id', (v) => typeof v === 'string' && v !== '', 'a non-empty string'),
    dir: field('dir', (v) => typeof v === 'string' && path.isAbsolute(v), 'an absolute path'),
    deadline: now + field('deadline_ms', (v) => Number.isSafeInteger(v) && v >= 0,
      'a non-negative integer'),
    function: field('function', optional, 'a string') || '',
    version: field('version', optional, 'a string') || '',
  };
}

/**
 * Return the handler's context: requestId and request_id (the public request id),
 * functionName and function, version, deadline (epoch ms) and getRemainingTimeInMillis()
 * (milliseconds left, never below 0).
 */
function makeContext(go) {
  return {
    requestId: go.requestId,
    request_id: go.requestId,
    functionName: go.function,
    function: go.function,
    version: go.version,
    deadline: go.deadline,
    getRemainingTimeInMillis() {
      return Math.max(0, go.deadline - Date.now());
    },
  };
}

/**
 * Everything between go and user code, in order; returns the parsed event. `sock` is the
 * control socket from wire.receive. Throws StepFailed.
 */
// EAGER
const prepare = (function prepare(sock, go) {
  runStep('closing the control socket', 'close_socket', wire.closeControl, sock);
  runStep('redirecting stdout and stderr', 'stdio', redirectStdio, go.dir);
  runStep('setting TMPDIR', 'tmpdir', setTmpdir, inDir(go.dir, 'tmp'));
  let text;
  try {
    text = fs.readFileSync(inDir(go.dir, 'event.json'), 'utf8');
  } catch (err) {
    throw new StepFailed('reading event.json', err);
  }
  const event = decodeEvent(text);
  lap('event');
  return event;
});

/** Run step(arg), then lap(token); throws StepFailed(name) with what the step threw. */
function runStep(name, token, step, arg) {
  try {
    step(arg);
  } catch (err) {
    throw new StepFailed(name, err);
  }
  lap(token);
}

/** Parse the event's text; throws EventRejected when JSON.parse refuses it (or overflows). */
function decodeEvent(text) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new EventRejected(err);
  }
}

/** The outcome for an event the parser refused: `rejected` names the field. */
function rejectedOutcome(err) {
  return { ok: false, rejected: 'event', error: error('EventRejected', err.message) };
}

// process.stdout and process.stderr are made by Node on first use, for what fd 1 or 2 is
// then: a pipe stream on the worker's own output, or a synchronous file stream. watchStdio
// puts a getter in front of Node's that notes that first use; STDIO_NAMES[fd] names fd 1, 2.
const STDIO_NAMES = [null, 'stdout', 'stderr'];
const stdioUsed = { stdout: false, stderr: false };
const stdioGetters = {};

/**
 * Note, from now on, when process.stdout or process.stderr is first used (Node's getter still
 * makes the stream, once). Call before user code. Returns nothing; never throws (a stream it
 * cannot watch counts as used).
 */
function watchStdio() {
  for (const name of ['stdout', 'stderr']) {
    const d = Object.getOwnPropertyDescriptor(process, name);
    if (!d || typeof d.get !== 'function' || !d.configurable) {
      stdioUsed[name] = true;
      continue;
    }
    const nodeGetter = d.get;
    stdioGetters[name] = function stdioGetter() {
      stdioUsed[name] = true;
      return nodeGetter.call(this);
    };
    try {
      Object.defineProperty(process, name,
        { configurable: true, enumerable: d.enumerable, get: stdioGetters[name] });
    } catch {
      stdioUsed[name] = true;
    }
  }
}

/** Return true if process[name] may exist as a stream already (see watchStdio). */
// EAGER
const stdioMade = (function stdioMade(name) {
  if (stdioUsed[name]) return true;
  const d = Object.getOwnPropertyDescriptor(process, name);
  return !d || d.get !== stdioGetters[name]; // replaced by user code: treat as made
});

/**
 * Make fds 1 and 2 themselves dir/stdout and dir/stderr (append, 0600), as the Python agent's
 * dup2 does: each is closed and the file opened in its place (open(2) takes the lowest free
 * descriptor; fd 0 is open), so writes made on fds 1 and 2 directly (fs.writeSync(1),
 * children spawned with inherited stdio) reach the request's files, and the supervisor can
 * answer without waiting for the worker's exit to see them. Then process.stdout and
 * process.stderr write synchronously to them: a stream Node already made (user code used it
 * before go, on the worker's own output) gets a write that writes to the fd; one not yet made
 * is left to Node, which makes it on first use as a synchronous file stream on the request's
 * file (and this step does not pay for making it). The console, and any reference to those
 * stream objects taken at import, follow. Returns nothing; throws the open errors, or an
 * Error when the file did not land on its fd (another thread opened a file in between).
 */
// EAGER
const redirectStdio = (function redirectStdio(dir) {
  for (let fd = 1; fd <= 2; fd++) {
    fs.closeSync(fd);
    const got = fs.openSync(inDir(dir, STDIO_NAMES[fd]), LOG_FLAGS, 0o600);
    if (got !== fd) {
      fs.closeSync(got);
      throw new Error(`dir/${STDIO_NAMES[fd]} opened as fd ${got}, not ${fd}`);
    }
  }
  for (let fd = 1; fd <= 2; fd++) {
    if (stdioMade(STDIO_NAMES[fd])) process[STDIO_NAMES[fd]].write = fileWriter(fd);
  }
});

/**
 * Return the path of `name` (a relative path) in the request directory `dir` (absolute, from
 * parseGo): `dir/name`, by concatenation, not path.join's normalising walk (the supervisor
 * sends a clean path; the kernel resolves it the same either way).
 */
function inDir(dir, name) {
  return dir.endsWith('/') ? dir + name : dir + '/' + name;
}

/**
 * Return a stream-compatible write(chunk[, encoding][, callback]) that writes synchronously to
 * `fd`. It returns true; the callback gets the write error (ENOSPC...) or null on the next
 * tick; it throws TypeError (like Node) for a chunk that is not a string or Uint8Array, or an
 * unknown encoding.
 */
function fileWriter(fd) {
  return function write(chunk, encoding, callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    let data;
    if (typeof chunk === 'string') {
      data = Buffer.from(chunk, encoding || 'utf8');
    } else if (chunk instanceof Uint8Array) {
      data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    } else {
      throw new TypeError('The "chunk" argument must be of type string or an instance of ' +
        'Buffer or Uint8Array');
    }
    let failure = null;
    try {
      writeAll(fd, data);
    } catch (e) {
      failure = e;
    }
    if (typeof callback === 'function') process.nextTick(callback, failure);
    return true;
  };
}

/** Make `dir` (created 0700 if missing) the TMPDIR; os.tmpdir() reads it on every call. */
// EAGER
const setTmpdir = (function setTmpdir(dir) {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  process.env.TMPDIR = dir;
});

/**
 * Return the JSON text of an outcome: {"ok":true,"value":V} or {"ok":false,"error":{...}}.
 * undefined becomes null. A value JSON.stringify rejects (a BigInt, a cycle, a throwing
 * toJSON) or cannot represent (a function or symbol) becomes an ok:false result with the
 * error's type (TypeError for those) and traceback "". NaN and Infinity become null, as
 * JSON.stringify does. Never throws.
 */
function encodeOutcome(outcome) {
  if (!outcome.ok && outcome.rejected) {
    return JSON.stringify({ ok: false, rejected: outcome.rejected, error: outcome.error });
  }
  if (!outcome.ok) return JSON.stringify({ ok: false, error: outcome.error });
  let json;
  try {
    json = outcome.value === undefined ? 'null' : JSON.stringify(outcome.value);
    if (json === undefined) {
      throw new TypeError(`the handler returned a ${typeof outcome.value}, which has no JSON form`);
    }
  } catch (err) {
    const d = describe(err);
    return JSON.stringify({ ok: false,
      error: error(d.type, `handler result is not JSON-serialisable: ${d.message}`) });
  }
  return '{"ok":true,"value":' + json + '}';
}

/**
 * Write `text` (from encodeOutcome) to dir/result.json atomically (dir/.result.json.tmp,
 * then rename). Returns nothing; throws the fs errors.
 */
// EAGER
const writeResult = (function writeResult(dir, text) {
  const tmp = inDir(dir, '.result.json.tmp');
  const fd = fs.openSync(tmp, RESULT_FLAGS, 0o600);
  try {
    writeAll(fd, Buffer.from(text));
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, inDir(dir, 'result.json'));
});

function writeAll(fd, data) {
  for (let off = 0; off < data.length;) off += fs.writeSync(fd, data, off, data.length - off);
}

/**
 * Run, before ready, what the steps after go run, on what is not a request's: a go line read
 * as from fd 3, parsed, and its context, decode and encode JSON, a step run and timed, write
 * through a file writer to /dev/null, the check that a closed descriptor is gone (fstat's
 * EBADF, whose error Node builds from a table made on first use), read /dev/null, a recursive
 * mkdir of an existing directory, a rename that fails, the timing. Each is done again, for
 * real, after go; this only pays V8's lazy compilation of their code (and Node's of the fs
 * paths they take) off the request path. Never throws.
 */
function rehearse() {
  try {
    let go = null;
    wire.lineReader((msg) => { go = parseGo(msg); }, () => go !== null)(
      Buffer.from('{"type":"go","request_id":"r-rehearsal","dir":"/","deadline_ms":0}\n'));
    makeContext(go).getRemainingTimeInMillis();
    decodeEvent('{"n": 1, "s": "x", "l": [1.5, null, true]}');
    runStep('rehearsal', 'rehearsal', String, '');
    withSteps(encodeOutcome({ ok: true, value: { n: 1, l: [1.5, null, true] } }));
    encodeOutcome({ ok: false, error: { type: 'Error', message: 'm', traceback: '' } });
    const fd = fs.openSync(inDir(go.dir, 'dev/null'), LOG_FLAGS, 0o600);
    try {
      fileWriter(fd)('\n');
    } finally {
      fs.closeSync(fd);
    }
    wire.controlFdIsSocket(fd); // closed: EBADF (a number another thread took: harmless)
    fs.readFileSync('/dev/null', 'utf8');
    fs.mkdirSync(inDir(go.dir, 'tmp'), { recursive: true, mode: 0o700 });
    fs.renameSync('/nonexistent-zygo-rehearsal/a', '/nonexistent-zygo-rehearsal/b');
  } catch {
    // the same steps run, and report, after go
  } finally {
    startLaps();
  }
}

module.exports = {
  StepFailed, EventRejected, parseGo, makeContext, prepare, decodeEvent, rejectedOutcome, redirectStdio, fileWriter, setTmpdir,
  encodeOutcome, writeResult, startLaps, lap, withSteps, rehearse, watchStdio, inDir,
};
