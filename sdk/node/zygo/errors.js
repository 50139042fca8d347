// Zygo's errors: one class per error code of the API (sdk/go/wire/wire.go).
//
// Every failed call the daemon answers is a ZygoError carrying what the error body held: code
// (the API's string, "not_found"), status (HTTP), message (the daemon's sentence, as it wrote
// it: `function "x" not found`), and for a failed invoke or import type, traceback and
// requestId. A code this client does not know is a plain ZygoError with that code.
// Unreachable (no daemon answered) and ApiVersionMismatch are ZygoErrors too.

/** The version of the API this client speaks (the daemon's is in every answer's Zygo-Api-Version). */
export const API_VERSION = 1;

const CATEGORY_TEXT = {
  not_found: 'not found', bad_request: 'invalid argument', too_large: 'too large',
  exists: 'already exists', failed_precondition: 'failed precondition',
  permission_denied: 'permission denied', unavailable: 'unavailable',
  deadline_exceeded: 'deadline exceeded', cancelled: 'cancelled',
  too_many_requests: 'too many requests', method_not_allowed: 'method not allowed',
};

const STATUS = {
  not_found: 404, bad_request: 400, too_large: 413, exists: 409, failed_precondition: 409,
  permission_denied: 403, unavailable: 503, deadline_exceeded: 504, cancelled: 499, internal: 500,
  unauthenticated: 401, import_failed: 422, too_many_requests: 429, method_not_allowed: 405,
  handler_error: 500, timeout: 504, crashed: 502, zygote_died: 503, response_too_large: 502,
  limit_exceeded: 502, bad_event: 400,
};

/** The HTTP status the daemon answers code with; 500 for a code this client does not know. */
export function statusOf(code) {
  return STATUS[code] ?? 500;
}

export class ZygoError extends Error {
  /**
   * @param {string} message the daemon's message
   * @param {{status?: number, code?: string, body?: object, headers?: object}} [opts]
   */
  constructor(message, { status = 0, code, body = {}, headers = {} } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code ?? new.target.code ?? '';
    this.body = body;
    this.headers = headers;
    this.type = body.type || null;
    this.traceback = body.traceback || null;
    this.requestId = body.request_id || null;
    this.answer = null;
  }

  toString() {
    return this.traceback ? `${this.message}\n${this.traceback}` : this.message;
  }
}

export class NotFound extends ZygoError { static code = 'not_found'; }
export class BadRequest extends ZygoError { static code = 'bad_request'; }
export class TooLarge extends ZygoError { static code = 'too_large'; }
export class Conflict extends ZygoError {}
export class AlreadyExists extends Conflict { static code = 'exists'; }
export class FailedPrecondition extends Conflict { static code = 'failed_precondition'; }
export class PermissionDenied extends ZygoError { static code = 'permission_denied'; }
export class Unavailable extends ZygoError { static code = 'unavailable'; }
export class DeadlineExceeded extends ZygoError { static code = 'deadline_exceeded'; }
export class Cancelled extends ZygoError { static code = 'cancelled'; }
export class Internal extends ZygoError { static code = 'internal'; }
export class Unauthenticated extends ZygoError { static code = 'unauthenticated'; }
export class ImportFailed extends ZygoError { static code = 'import_failed'; }
export class TooManyRequests extends ZygoError {
  static code = 'too_many_requests';
  /** The daemon's Retry-After in seconds, or null. */
  get retryAfter() {
    const v = String(this.headers['retry-after'] ?? '').trim();
    return /^\d+$/.test(v) ? Number(v) : null;
  }
}
export class MethodNotAllowed extends ZygoError {
  static code = 'method_not_allowed';
  /** The methods the route takes (the Allow header). */
  get allow() {
    return String(this.headers.allow ?? '').split(',').map((m) => m.trim()).filter(Boolean);
  }
}
export class InvokeError extends ZygoError {}
export class HandlerError extends InvokeError { static code = 'handler_error'; }
export class InvokeTimeout extends InvokeError { static code = 'timeout'; }
export class Crashed extends InvokeError { static code = 'crashed'; }
export class ZygoteDied extends InvokeError { static code = 'zygote_died'; }
export class ResponseTooLarge extends InvokeError { static code = 'response_too_large'; }
export class LimitExceeded extends InvokeError { static code = 'limit_exceeded'; }
/** 400: the runtime's JSON parser refused the event (an InvokeError; check code for bad_request too). */
export class BadEvent extends InvokeError { static code = 'bad_event'; }
export class HTTPError extends ZygoError { static code = 'http'; }
export class Unreachable extends ZygoError {
  static code = 'unreachable';
  constructor(message, where) {
    super(message);
    this.where = where;
  }
}
/**
 * The daemon's TLS certificate did not verify: not signed by the CA this client trusts, or
 * not for the name it connected by; the message says which and what to set. No call was made.
 */
export class CertificateError extends ZygoError {
  static code = 'certificate';
  constructor(message, where) {
    super(message);
    this.where = where;
  }
}
/**
 * Where to find the daemon is wrongly said: an address that does not parse, a context file
 * that does not parse, holds an unknown key or a token others may read. The message names the
 * option, variable or file (and key or line) at fault. No call was made.
 */
export class ConfigError extends ZygoError { static code = 'config'; }
export class ApiVersionMismatch extends ZygoError {
  static code = 'api_version';
  constructor(daemonVersion) {
    super(`the daemon speaks API version ${daemonVersion}; this client speaks ${API_VERSION} (use a client of the daemon's release)`);
    this.daemonVersion = daemonVersion;
  }
}

/** Every error code of the API and its class. */
export const ERRORS = Object.fromEntries([
  NotFound, BadRequest, TooLarge, AlreadyExists, FailedPrecondition, PermissionDenied, Unavailable,
  DeadlineExceeded, Cancelled, Internal, Unauthenticated, ImportFailed, TooManyRequests,
  MethodNotAllowed, HandlerError, InvokeTimeout, Crashed, ZygoteDied, ResponseTooLarge,
  LimitExceeded, BadEvent, HTTPError,
].map((cls) => [cls.code, cls]));

/**
 * The error of an error body (the object under "error") answered with status: the class of
 * its code, the message as the daemon wrote it (the code's phrase, else the code, when empty).
 */
export function fromBody(status, body, headers = {}) {
  const code = String(body.code ?? '');
  const message = String(body.message ?? '') || CATEGORY_TEXT[code] || code;
  const Cls = ERRORS[code] ?? ZygoError;
  return new Cls(message, { status, code, body, headers });
}
