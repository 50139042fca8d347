'use strict';
// Turning thrown values into the {"type","message","traceback"} objects of the protocol, used
// for import_error (sent on fd 3) and for error results in result.json.

const path = require('path');
const util = require('util');

const MAX_MESSAGE = 8 * 1024;
const MAX_TRACEBACK = 40 * 1024;
// A stack line in one of the agent's own files (not in a directory below, where tests keep
// their fixtures).
const AGENT_FRAME = new RegExp(
  `^\\s*at .*${escapeRegExp(__dirname + path.sep)}[^${escapeRegExp(path.sep)}]+\\.js:\\d`);

/**
 * Return {type, message, traceback} for any thrown value. Never throws, even when the value's
 * getters, toString or custom inspect do.
 *
 * - An Error: type is its name, or its class name when a subclass kept the name "Error";
 *   message is error.message (cut to 8 KiB); traceback is util.inspect(error) (the stack plus
 *   `cause`, extra properties such as `code`, AggregateError's errors), without the agent's
 *   own frames, keeping its last 40 KiB.
 * - Anything else (`throw "x"`, `throw {code: 1}`, `throw null`): type is the value's class name
 *   ("Object") or typeof ("string", "number"), or "null"; message is the string itself or its
 *   util.inspect form; traceback is "" (a thrown non-Error carries no stack).
 */
function describe(value) {
  if (value instanceof Error) {
    return {
      type: errorType(value),
      message: cutHead(safe(() => String(value.message), '<message unreadable>'), MAX_MESSAGE),
      traceback: cutTail(dropAgentFrames(traceOf(value)), MAX_TRACEBACK),
    };
  }
  return {
    type: valueType(value),
    message: cutHead(safe(() => (typeof value === 'string' ? value : util.inspect(value)),
      '<value unreadable>'), MAX_MESSAGE),
    traceback: '',
  };
}

/** Return an error object for a failure with no thrown value behind it (traceback ""). */
function error(type, message) {
  return { type, message: cutHead(String(message), MAX_MESSAGE), traceback: '' };
}

function errorType(err) {
  return safe(() => {
    const name = typeof err.name === 'string' && err.name ? err.name : 'Error';
    const ctor = err.constructor && err.constructor.name;
    return name === 'Error' && typeof ctor === 'string' && ctor ? ctor : name;
  }, 'Error');
}

function valueType(value) {
  if (value === null) return 'null';
  if (typeof value !== 'object' && typeof value !== 'function') return typeof value;
  return safe(() => {
    const proto = Object.getPrototypeOf(value);
    const ctor = proto && proto.constructor && proto.constructor.name;
    return typeof ctor === 'string' && ctor ? ctor : typeof value;
  }, typeof value);
}

function traceOf(err) {
  const inspected = safe(() => util.inspect(err, { depth: 4, colors: false }), '');
  if (inspected) return inspected;
  return safe(() => (typeof err.stack === 'string' ? err.stack : ''), '');
}

/** Return `trace` without the stack lines that point into the agent's own files. */
function dropAgentFrames(trace) {
  return trace.split('\n')
    .filter((line) => !AGENT_FRAME.test(line))
    .join('\n');
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function safe(fn, fallback) {
  try {
    return fn();
  } catch {
    return fallback;
  }
}

function cutHead(text, limit) {
  if (text.length <= limit) return text;
  return text.slice(0, limit) + `... [${text.length - limit} characters cut]`;
}

function cutTail(text, limit) {
  if (text.length <= limit) return text;
  return `[${text.length - limit} characters cut] ...` + text.slice(-limit);
}

module.exports = { describe, error, dropAgentFrames, cutHead, cutTail };
