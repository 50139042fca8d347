"""Importing the user's handler (protocol start-up step 3)."""

import importlib
import sys
from typing import Callable

from . import errors


class ImportFailure(Exception):
    """The handler could not be imported or resolved; ``error`` is the protocol's
    ``{"type","message","traceback"}`` object for ``import_error``."""

    def __init__(self, error: dict):
        self.error = error
        super().__init__(f"{error['type']}: {error['message']}")


def load_handler(code_dir: str, spec: str) -> Callable:
    """Put ``code_dir`` first on ``sys.path``, import ``MODULE`` from ``spec``
    (``MODULE:FUNC``, where FUNC may be a dotted attribute path) and return the callable.

    Raises ``ImportFailure`` for a malformed spec, any exception raised while importing
    (``SystemExit`` and ``KeyboardInterrupt`` included), a missing attribute, or an attribute
    that is not callable.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ImportFailure(errors.error(
            "ValueError", f"handler {spec!r} is not of the form MODULE:FUNCTION"))
    sys.path.insert(0, code_dir)
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
