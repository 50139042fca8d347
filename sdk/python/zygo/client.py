"""The client object and how it finds the daemon (the same rules as the zygo CLI)."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ._http import Transport
from .functions import Functions
from .sandboxes import Checkpoints, Sandboxes

#: The daemon's unix socket's name inside its state directory.
SOCKET_NAME = "zygo.sock"
#: The file, in the state directory, holding the bearer token of the daemon's TCP listener.
TOKEN_NAME = "api.token"


def default_state_dir() -> str:
    """The state directory a daemon uses when given none: /var/lib/zygo for root, else
    $XDG_STATE_HOME/zygo, else ~/.local/state/zygo."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/var/lib/zygo"
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return os.path.join(xdg, "zygo")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "zygo")


def resolve_state_dir(state_dir: Optional[str] = None) -> str:
    """state_dir, else $ZYGO_STATE_DIR, else default_state_dir()."""
    return state_dir or os.environ.get("ZYGO_STATE_DIR") or default_state_dir()


def _read_token(state_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(state_dir, TOKEN_NAME), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


class Zygo:
    """A client of one Zygo daemon; safe to share between threads.

    With no arguments it finds the daemon as the CLI does: TCP when ``addr`` or $ZYGO_ADDR
    is set ("host:port", or "https://host:port" with ``ca``, a CA file, to check its
    certificate), sending ``token``, else $ZYGO_TOKEN, else the contents of api.token in the
    state directory; otherwise the unix socket ``socket``, else zygo.sock in ``state_dir``,
    else in $ZYGO_STATE_DIR, else in default_state_dir(). ``timeout`` (seconds) bounds each
    socket operation; None (the default) waits as long as the daemon works (a sandbox's
    create or fork takes seconds).

    ``client.functions`` deploys and invokes functions, ``client.sandboxes`` creates and
    finds sandboxes, ``client.checkpoints`` lists and removes checkpoints. A context manager;
    close() is a no-op kept for symmetry (no connection outlives a call).
    """

    def __init__(self, *, state_dir: Optional[str] = None, socket: Optional[str] = None,
                 addr: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None,
                 timeout: Optional[float] = None):
        addr = addr or os.environ.get("ZYGO_ADDR") or None
        if addr is not None:
            token = token or os.environ.get("ZYGO_TOKEN", "").strip() or _read_token(resolve_state_dir(state_dir))
            self._t = Transport(addr=addr, token=token, ca=ca, timeout=timeout)
        else:
            path = socket or os.path.join(resolve_state_dir(state_dir), SOCKET_NAME)
            self._t = Transport(socket_path=path, timeout=timeout)
        self.functions = Functions(self._t)
        self.sandboxes = Sandboxes(self._t)
        self.checkpoints = Checkpoints(self._t)

    @property
    def where(self) -> str:
        """The unix socket's path or the TCP address this client talks to."""
        return self._t.where()

    def status(self) -> Dict[str, Any]:
        """The daemon's status: {"version", "uptime_ms", "functions", "api_version", ...}."""
        return self._t.call("GET", "/v1/status")

    def close(self) -> None:
        pass

    def __enter__(self) -> "Zygo":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Zygo({self.where!r})"

