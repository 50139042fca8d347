'use strict';
// Zygo's Node worker: loads one function's handler, waits for one request, serves it, exits.
// The contract is "The worker protocol (Node)" in docs/protocol.md; the supervisor starts
//
//   node /opt/zygo/agents/node/zygo_worker.js --code /code --handler FILE:EXPORT
//
// with fd 3 an AF_UNIX SOCK_STREAM socket carrying newline-delimited JSON.
//
// Phases, in order (`phase` below):
//   loading    load the handler (loader.js), run the warm-up checks (warmup.js), send `ready`
//              or `import_error`;
//   idle       read fd 3 until `go` (`warm` is read and ignored, other types are logged and
//              ignored);
//   preparing  request.prepare: fd 3 closed, stdio and TMPDIR set, event read (no user code);
//   running    the handler;
//   done       result.json written (or import_error sent), exiting.
// Uncaught exceptions, unhandled rejections, process.exit() and an event loop that empties
// under a pending promise are turned into the phase's outcome (an import_error while
// loading, an error result while running).
//
// Exit status:
//   0  result.json holds the handler's outcome (its value or its error); or the control
//      socket closed before go (a worker drained while idle)
//   1  import_error was sent (or it, or ready, could not be sent)
//   2  usage error (arguments, fd 3 not a socket) or a malformed go; no result
//   3  the agent failed around the handler; result.json holds a ZygoAgentError when the
//      request directory allowed it
//   4  an uncaught exception or unhandled rejection while idle (import-time code that fails
//      later, e.g. in a timer); no result

// Functions that first run after go are parenthesized expressions, `const f = (function f()
// {...});`, marked `// EAGER`: V8 compiles a parenthesized function when it compiles the module
// (its heuristic for functions invoked at once), where it compiles a declaration on its first
// call, which after go put that compilation on the request path.

const util = require('util');
const wire = require('./wire');
const loader = require('./loader');
const warmup = require('./warmup');
const request = require('./request');
const { describe, error } = require('./errors');
const { log } = require('./agentlog');

const EXIT_OK = 0;
const EXIT_IMPORT_ERROR = 1;
const EXIT_USAGE = 2;
const EXIT_AGENT_ERROR = 3;
const EXIT_IDLE_CRASH = 4;

const realExit = process.exit;
let phase = 'loading';
let requestDir = null; // go.dir once running

/** Exit with `code`; 'exit' listeners that throw cannot stop it. Never returns. */
function exit(code) {
  try {
    realExit.call(process, code);
  } catch (err) {
    log(`an exit listener threw: ${describe(err).message}`);
  }
  process.reallyExit(code);
}

/**
 * Return {code, handler} from argv (--code DIR --handler FILE:EXPORT). Exits with status 2
 * on a usage error.
 */
function parseArgs(argv) {
  try {
    const { values } = util.parseArgs({ args: argv, strict: true,
      options: { code: { type: 'string' }, handler: { type: 'string' } } });
    if (!values.code || !values.handler) throw new Error('--code and --handler are required');
    return values;
  } catch (err) {
    log(`usage: zygo_worker.js --code DIR --handler FILE:EXPORT (${err.message})`);
    return exit(EXIT_USAGE);
  }
}

/** Send import_error with the protocol error object `err` and exit 1. Never returns. */
function importFailed(err) {
  phase = 'done';
  try {
    wire.sendSync({ type: 'import_error', error: err });
  } catch (e) {
    log(`could not send import_error: ${e.message}`);
  }
  exit(EXIT_IMPORT_ERROR);
}

/** Write the request's outcome and exit 0 (3 if result.json cannot be written). */
// EAGER
const finish = (function finish(outcome) {
  if (phase !== 'running') return;
  request.lap('handler');
  const text = request.encodeOutcome(outcome); // may run the value's toJSON: still 'running'
  phase = 'done';
  request.lap('encode');
  try {
    request.writeResult(requestDir, request.withSteps(text));
  } catch (err) {
    log(`could not write result.json: ${err.message}`);
    exit(EXIT_AGENT_ERROR);
  }
  exit(EXIT_OK);
});

/** An uncaught exception or unhandled rejection, in whatever phase it happens. */
function onStray(value, what) {
  if (phase === 'loading') importFailed(describe(value));
  if (phase === 'running') finish({ ok: false, error: describe(value) });
  const d = describe(value);
  const when = phase === 'idle' ? 'waiting for go' : `in phase ${phase}`;
  log(`${what} while ${when}: ${d.type}: ${d.message} ${d.traceback}`);
  if (phase === 'idle') exit(EXIT_IDLE_CRASH);
}

/** 'beforeExit': nothing is left to run while a promise of ours is still pending. */
function onEmptyLoop() {
  if (phase === 'loading') {
    importFailed(error('UnsettledTopLevelAwaitError', 'loading the handler never finished: ' +
      'its top-level await is pending and nothing is left to run'));
  }
  finish({ ok: false, error: error('UnsettledPromiseError', 'the handler\'s promise never ' +
    'settled: nothing was left to run while it was pending') });
}

/** process.exit as user code sees it: while loading or running it ends the phase. */
function guardedExit(code) {
  const call = `process.exit(${code === undefined ? '' : util.inspect(code)})`;
  if (phase === 'loading') {
    importFailed(error('ProcessExitError', `${call} was called while loading the handler`));
  }
  finish({ ok: false,
    error: error('ProcessExitError', `the handler called ${call} before returning`) });
  exit(code);
}

/** Serve the go message `msg` with `handler`; ends with exit. */
// EAGER
const serve = (async function serve(sock, msg, handler) {
  let go;
  try {
    go = request.parseGo(msg);
  } catch (err) {
    log(`invalid go: ${err.message}`);
    exit(EXIT_USAGE);
  }
  let event;
  request.startLaps();
  try {
    event = request.prepare(sock, go);
  } catch (err) {
    if (err instanceof request.EventRejected) {
      try {
        request.writeResult(go.dir, request.encodeOutcome(request.rejectedOutcome(err)));
      } catch (e) {
        log(`could not write result.json: ${e.message}`);
        exit(EXIT_AGENT_ERROR);
      }
      exit(EXIT_OK);
    }
    log(`before the handler: ${err.message}`);
    try {
      request.writeResult(go.dir,
        request.encodeOutcome({ ok: false, error: error('ZygoAgentError', err.message) }));
    } catch (e) {
      log(`could not write result.json: ${e.message}`);
    }
    exit(EXIT_AGENT_ERROR);
  }
  requestDir = go.dir;
  phase = 'running';
  const context = request.makeContext(go);
  await null; // call the handler from a fresh stack: its traces stop at the handler's frames
  let value;
  try {
    value = await handler(event, context);
  } catch (err) {
    return finish({ ok: false, error: describe(err) });
  }
  return finish({ ok: true, value });
});

async function main() {
  request.watchStdio(); // before any user code
  const args = parseArgs(process.argv.slice(2));
  if (!wire.controlFdIsSocket()) {
    log(`fd ${wire.CONTROL_FD} is not the control socket`);
    exit(EXIT_USAGE);
  }
  process.on('uncaughtException', (err) => onStray(err, 'uncaught exception'));
  process.on('unhandledRejection', (reason) => onStray(reason, 'unhandled rejection'));
  process.on('beforeExit', onEmptyLoop);
  process.exit = guardedExit;

  let handler;
  try {
    handler = await loader.loadHandler(args.code, args.handler);
  } catch (err) {
    importFailed(describe(err));
  }
  const checks = warmup.run();
  request.rehearse(); // off the request path: the worker is not ready yet
  try {
    wire.sendSync({ type: 'ready', pid: process.pid, node: process.version,
      openssl: process.versions.openssl || '', checks });
  } catch (err) {
    log(`could not send ready: ${err.message}`);
    exit(err.code === 'EPIPE' || err.code === 'ECONNRESET' ? EXIT_OK : EXIT_IMPORT_ERROR);
  }
  phase = 'idle';
  const sock = wire.receive((msg) => {
    if (phase !== 'idle' || msg.type === 'warm') return; // warm: read, nothing to do
    if (msg.type !== 'go') {
      log(`ignoring message of unknown type ${JSON.stringify(msg.type)}`);
      return;
    }
    phase = 'preparing';
    serve(sock, msg, handler);
  }, () => {
    if (phase === 'idle') exit(EXIT_OK); // drained before go
  });
}

main();
