"""Zygo's Python client: deploy and invoke functions, and drive gVisor sandboxes that are
checkpointed, forked N ways and rolled back, from outside them. Standard library only.

    import zygo

    client = zygo.Zygo()                      # finds the daemon as the zygo CLI does
    client.functions.deploy("examples/hello")
    print(client.functions.invoke("hello", {"name": "x"}).value)

    with client.sandboxes.create(name="agent") as sb:     # killed when the block ends
        sb.run_code("x = 41")
        cp = sb.checkpoint("base")
        with sb.fork(3) as fork:                           # three copies of the running sandbox
            for child in fork.sandboxes:
                print(child.run_code("x + 1").value, child.generation())
        sb.rollback(cp)

Errors are ZygoError subclasses, one per API error code (zygo.errors). Code *inside* a
sandbox uses the separate zygo_sandbox package.
"""

from .client import SOCKET_NAME, TOKEN_NAME, Zygo, default_state_dir, resolve_state_dir
from .errors import (API_VERSION, AlreadyExists, ApiVersionMismatch, BadEvent, BadRequest, Cancelled,
                     CertificateError, ConfigError, Conflict, Crashed, DeadlineExceeded, FailedPrecondition,
                     HandlerError, HTTPError,
                     ImportFailed, Internal, InvokeError, InvokeTimeout, LimitExceeded, MethodNotAllowed,
                     NotFound, PermissionDenied, ResponseTooLarge, TooLarge, TooManyRequests,
                     Unauthenticated, Unavailable, Unreachable, ZygoError, ZygoteDied)
from .functions import InvokeResult, pack_dir
from .sandboxes import CodeResult, ExecResult, ExecStream, ForkChild, ForkResult, Output, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Zygo", "Sandbox", "ExecResult", "ExecStream", "Output", "CodeResult", "ForkResult", "ForkChild",
    "InvokeResult", "pack_dir", "default_state_dir", "resolve_state_dir", "SOCKET_NAME", "TOKEN_NAME",
    "API_VERSION", "ZygoError", "NotFound", "BadRequest", "TooLarge", "Conflict", "AlreadyExists",
    "FailedPrecondition", "PermissionDenied", "Unavailable", "DeadlineExceeded", "Cancelled", "Internal",
    "Unauthenticated", "ImportFailed", "TooManyRequests", "MethodNotAllowed", "InvokeError",
    "HandlerError", "InvokeTimeout", "Crashed", "ZygoteDied", "ResponseTooLarge", "LimitExceeded",
    "BadEvent", "HTTPError", "Unreachable", "ApiVersionMismatch", "CertificateError", "ConfigError",
]
