"""Turning exceptions into the ``{"type","message","traceback"}`` objects of the protocol.

Used for ``import_error`` (sent on the control socket, so bounded to fit one datagram) and for
``result.json`` error results.
"""

import traceback

MAX_MESSAGE = 8 * 1024
MAX_TRACEBACK = 40 * 1024


def describe(exc: BaseException, skip_frames: int = 0) -> dict:
    """Return ``{"type", "message", "traceback"}`` for ``exc``.

    ``type`` is the exception class name; ``message`` is ``str(exc)`` cut to 8 KiB; the
    traceback leaves out its first ``skip_frames`` frames (the agent's own) and keeps its last
    40 KiB (where the error is). Never raises, even when the exception's own ``__str__`` does.
    """
    return {
        "type": type(exc).__name__,
        "message": _cut_head(_safe_str(exc), MAX_MESSAGE),
        "traceback": _cut_tail(_format(exc, skip_frames), MAX_TRACEBACK),
    }


def error(type_name: str, message: str) -> dict:
    """Return an error object for a failure that has no Python exception behind it."""
    return {"type": type_name, "message": _cut_head(message, MAX_MESSAGE), "traceback": ""}


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error
        return f"<{type(exc).__name__}: str() failed>"


def _format(exc: BaseException, skip_frames: int) -> str:
    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # noqa: BLE001
        return ""


def _cut_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} characters cut]"


def _cut_tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"[{len(text) - limit} characters cut] ..." + text[-limit:]
