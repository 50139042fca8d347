"""Zygo's exceptions: one class per error code of the API (sdk/go/wire/wire.go).

Every failed call the daemon answers is a ZygoError carrying what the error body held:
``code`` (the API's string, "not_found"), ``status`` (the HTTP status), ``message`` (the
daemon's sentence, printed as it is: ``function "x" not found``), and for a failed invoke or
import ``type``, ``traceback`` and ``request_id``. ``str(err)`` is the message, with the
handler's traceback after it when there is one.

Catch a family with its base class: ``Conflict`` is both ``AlreadyExists`` and
``FailedPrecondition``; ``InvokeError`` is every outcome of a request that ran and failed
(``HandlerError``, ``InvokeTimeout``, ...). A code this client does not know is a plain
ZygoError with that code. ``Unreachable`` (no daemon answered) and ``ApiVersionMismatch``
(the daemon speaks another API version) are ZygoErrors too, so one ``except ZygoError``
catches everything this package raises about the daemon.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

#: The version of the API this client speaks; every answer carries the daemon's in the
#: ``Zygo-Api-Version`` header.
API_VERSION = 1

# The phrase of a category code, used only when the daemon sent no message.
_CATEGORY_TEXT = {
    "not_found": "not found",
    "bad_request": "invalid argument",
    "too_large": "too large",
    "exists": "already exists",
    "failed_precondition": "failed precondition",
    "permission_denied": "permission denied",
    "unavailable": "unavailable",
    "deadline_exceeded": "deadline exceeded",
    "cancelled": "cancelled",
    "too_many_requests": "too many requests",
    "method_not_allowed": "method not allowed",
}


class ZygoError(Exception):
    """A call the daemon refused or failed, or that reached no daemon.

    Attributes: code (str, the API's error code; "http" for an answer without an error
    body), status (int HTTP status; 0 when there was no answer), message (str), type and
    traceback (str or None: the handler's exception of a failed invoke or import),
    request_id (str or None: of a failed invoke), body (dict: the whole error body),
    answer (the whole JSON answer when it held more than the error: a fork whose every
    child failed lists them), headers (dict, lower-case names).
    """

    code = ""

    def __init__(self, message: str, *, status: int = 0, code: Optional[str] = None,
                 body: Optional[Dict[str, Any]] = None, headers: Optional[Dict[str, str]] = None):
        self.message = message
        self.status = status
        if code is not None:
            self.code = code
        self.body = dict(body or {})
        self.headers = dict(headers or {})
        self.type = self.body.get("type") or None
        self.traceback = self.body.get("traceback") or None
        self.request_id = self.body.get("request_id") or None
        self.answer: Any = None
        super().__init__(message)

    def __str__(self) -> str:
        if self.traceback:
            return self.message + "\n" + self.traceback
        return self.message


class NotFound(ZygoError):
    """404: no such function, sandbox, checkpoint, file, binary or route."""
    code = "not_found"


class BadRequest(ZygoError):
    """400: a malformed or out-of-range request; the message names the field."""
    code = "bad_request"


class TooLarge(ZygoError):
    """413: a body over its limit."""
    code = "too_large"


class Conflict(ZygoError):
    """409: the name is taken, or the object's state forbids the call."""


class AlreadyExists(Conflict):
    """409: the name is taken."""
    code = "exists"


class FailedPrecondition(Conflict):
    """409: the object's state forbids the call (a checkpoint still referenced, a sandbox
    that is not running)."""
    code = "failed_precondition"


class PermissionDenied(ZygoError):
    """403: the target refuses it (a read-only or protected path in a sandbox)."""
    code = "permission_denied"


class Unavailable(ZygoError):
    """503: not available on this daemon now (sandboxes on a daemon without them, say); the
    message says why."""
    code = "unavailable"


class DeadlineExceeded(ZygoError):
    """504: the daemon gave up waiting."""
    code = "deadline_exceeded"


class Cancelled(ZygoError):
    """499: the call was cancelled."""
    code = "cancelled"


class Internal(ZygoError):
    """500: the daemon failed."""
    code = "internal"


class Unauthenticated(ZygoError):
    """401: no or a wrong bearer token (TCP): pass ``token=`` or set $ZYGO_TOKEN to the
    contents of api.token in the daemon's state directory."""
    code = "unauthenticated"


class ImportFailed(ZygoError):
    """422: a deploy whose new version failed to import; ``traceback`` says why. The
    previous version keeps serving."""
    code = "import_failed"


class TooManyRequests(ZygoError):
    """429: over a rate or concurrency limit. ``retry_after`` is the daemon's Retry-After in
    seconds (int), or None when it sent none."""
    code = "too_many_requests"

    @property
    def retry_after(self) -> Optional[int]:
        v = self.headers.get("retry-after", "")
        return int(v) if v.strip().isdigit() else None


class MethodNotAllowed(ZygoError):
    """405: the route exists but not with this method. ``allow`` lists the methods it takes
    (from the Allow header)."""
    code = "method_not_allowed"

    @property
    def allow(self) -> list:
        return [m.strip() for m in self.headers.get("allow", "").split(",") if m.strip()]


class InvokeError(ZygoError):
    """A function's request ran, or was meant to, and failed; ``request_id`` names its log
    lines (``client.functions.logs(name, request_id=...)``)."""


class HandlerError(InvokeError):
    """500: the handler raised; ``type`` and ``traceback`` are its exception's."""
    code = "handler_error"


class InvokeTimeout(InvokeError):
    """504: the request was killed at the function's timeout."""
    code = "timeout"


class Crashed(InvokeError):
    """502: the request's process died without a result."""
    code = "crashed"


class ZygoteDied(InvokeError):
    """503: the function's zygote died under the request."""
    code = "zygote_died"


class ResponseTooLarge(InvokeError):
    """502: the handler's result was over the function's max_response_kib."""
    code = "response_too_large"


class LimitExceeded(InvokeError):
    """502: the request's memory_mib, pids or cpu_ms limit killed it."""
    code = "limit_exceeded"


class BadEvent(InvokeError, BadRequest):
    """400: the runtime's JSON parser refused the event."""
    code = "bad_event"


class HTTPError(ZygoError):
    """An answer that carried no error body (a proxy's page, say): ``message`` holds the
    status and the start of what the body held."""
    code = "http"


class Unreachable(ZygoError, ConnectionError):
    """No daemon answered: nothing listens on the socket or address, or the socket is
    not owned by root or this user. ``where`` is the socket's path or the TCP address."""
    code = "unreachable"

    def __init__(self, message: str, where: str):
        super().__init__(message)
        self.where = where


class CertificateError(ZygoError, ConnectionError):
    """The daemon's TLS certificate did not verify: not signed by the CA this client
    trusts, or not for the name it connected by. The message says which and what to set
    (``ca``, $ZYGO_CA or ca in the context file; server_name). ``where`` is the address."""
    code = "certificate"

    def __init__(self, message: str, where: str):
        super().__init__(message)
        self.where = where


class ConfigError(ZygoError, ValueError):
    """Where to find the daemon is wrongly said: an address that does not parse, a context
    file that does not parse, holds an unknown key or a token others may read. The message
    names the argument, variable or file (and key) at fault. No call was made."""
    code = "config"


class ApiVersionMismatch(ZygoError):
    """The daemon speaks another version of the API than this client (``daemon_version``,
    int); upgrade whichever is older."""
    code = "api_version"

    def __init__(self, daemon_version: str):
        self.daemon_version = daemon_version
        super().__init__(f"the daemon speaks API version {daemon_version}; this client speaks {API_VERSION}"
                         " (use a client of the daemon's release)")


#: Every error code of the API and its exception class.
ERRORS = {cls.code: cls for cls in (
    NotFound, BadRequest, TooLarge, AlreadyExists, FailedPrecondition, PermissionDenied,
    Unavailable, DeadlineExceeded, Cancelled, Internal, Unauthenticated, ImportFailed,
    TooManyRequests, MethodNotAllowed, HandlerError, InvokeTimeout, Crashed, ZygoteDied,
    ResponseTooLarge, LimitExceeded, BadEvent, HTTPError)}


# The HTTP status of each code, for an error that arrives inside a stream after its 200.
_STATUS = {
    "not_found": 404, "bad_request": 400, "too_large": 413, "exists": 409, "failed_precondition": 409,
    "permission_denied": 403, "unavailable": 503, "deadline_exceeded": 504, "cancelled": 499,
    "internal": 500, "unauthenticated": 401, "import_failed": 422, "too_many_requests": 429,
    "method_not_allowed": 405, "handler_error": 500, "timeout": 504, "crashed": 502,
    "zygote_died": 503, "response_too_large": 502, "limit_exceeded": 502, "bad_event": 400,
}


def status_of(code: str) -> int:
    """The HTTP status the daemon answers code with; 500 for a code this client does not know."""
    return _STATUS.get(code, 500)


def from_body(status: int, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> ZygoError:
    """Returns the exception of an error body (the object under "error") answered with
    status: the class of its code (ZygoError for a code this client does not know), the
    message as the daemon wrote it (the code's phrase, else the code, when it is empty)."""
    code = str(body.get("code") or "")
    message = str(body.get("message") or "") or _CATEGORY_TEXT.get(code, code)
    cls = ERRORS.get(code, ZygoError)
    return cls(message, status=status, code=code, body=body, headers=headers)
