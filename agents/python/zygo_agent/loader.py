"""Importing the user's handler (protocol start-up step 3)."""

import importlib
import os
import sys
from typing import Callable, List, Sequence

from . import errors


class ImportFailure(Exception):
    """The handler could not be imported or resolved; ``error`` is the protocol's
    ``{"type","message","traceback"}`` object for ``import_error``."""

    def __init__(self, error: dict):
        self.error = error
        super().__init__(f"{error['type']}: {error['message']}")


def search_path(code_dir: str, python_path: Sequence[str] = (), env_path: str = "") -> List[str]:
    """Return the directories put in front of ``sys.path``, in order: ``code_dir``, then each
    entry of the manifest's ``python_path`` (relative to ``code_dir``; the daemon checked that
    each is a directory of the bundle), then each entry of ``env_path`` (the function's
    ``[env] PYTHONPATH``, colon-separated; relative entries are taken from ``code_dir``, empty
    ones skipped). The agent runs Python isolated (``-I``), which ignores ``PYTHONPATH``:
    this is how it is honoured."""
    dirs = [code_dir] + [os.path.join(code_dir, p) for p in python_path]
    dirs += [os.path.join(code_dir, p) for p in env_path.split(":") if p]
    return dirs


def load_handler(code_dir: str, spec: str, python_path: Sequence[str] = ()) -> Callable:
    """Put :func:`search_path` (``code_dir``, ``python_path``, ``$PYTHONPATH``) first on
    ``sys.path``, import ``MODULE`` from ``spec`` (``MODULE:FUNC``, where FUNC may be a dotted
    attribute path) and return the callable.

    Raises ``ImportFailure`` for a malformed spec, any exception raised while importing
    (``SystemExit`` and ``KeyboardInterrupt`` included), a missing attribute, or an attribute
    that is not callable.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ImportFailure(errors.error(
            "ValueError", f"handler {spec!r} is not of the form MODULE:FUNCTION"))
    sys.path[0:0] = search_path(code_dir, python_path, os.environ.get("PYTHONPATH", ""))
    try:
        obj = importlib.import_module(module_name)
        for part in attr_path.split("."):
            obj = getattr(obj, part)
    except BaseException as exc:  # noqa: BLE001 - every import failure is reported
        raise ImportFailure(errors.describe(exc, skip_frames=1)) from None
    if not callable(obj):
        raise ImportFailure(errors.error(
            "TypeError", f"handler {spec!r} is a {type(obj).__name__}, not a function"))
    return obj
