"""The client object and how it finds the daemon (the same rules as the zygo CLI)."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ._context import resolve
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


class Zygo:
    """A client of one Zygo daemon; safe to share between threads.

    It finds the daemon as the zygo CLI does (zygo._context): each setting is the argument,
    else its environment variable, else the context file ($XDG_CONFIG_HOME/zygo/config.toml,
    else ~/.config/zygo/config.toml: keys address, token, ca, server_name), else a default:

    - ``addr`` (or ``socket``, a unix socket's path), $ZYGO_ADDR, address: "host:port"
      (plain HTTP; TLS when a CA or server name is set), "https://host:port" (TLS) or
      "http://host:port"; default: zygo.sock in ``state_dir``, else in $ZYGO_STATE_DIR,
      else in default_state_dir();
    - ``token``, $ZYGO_TOKEN, token (sent only to the file's own address, never to one given
      by argument or $ZYGO_ADDR), else api.token in the state directory;
    - ``ca`` (a PEM CA file, or the daemon's self-signed certificate), $ZYGO_CA, ca (relative
      to the file); default: the system's roots;
    - ``server_name``, server_name (with the file's address only): the name the certificate
      must hold; default: the address's host.

    Raises ConfigError (naming the argument, variable or file at fault) for an address that
    does not parse, a context file that does not parse or holds a key it does not know, or
    one holding a token that group or others may read. ``timeout`` (seconds) bounds each
    socket operation; None (the default) waits as long as the daemon works (a sandbox's
    create or fork takes seconds).

    ``client.functions`` deploys and invokes functions, ``client.sandboxes`` creates and
    finds sandboxes, ``client.checkpoints`` lists and removes checkpoints. A context manager;
    close() is a no-op kept for symmetry (no connection outlives a call).
    """

    def __init__(self, *, state_dir: Optional[str] = None, socket: Optional[str] = None,
                 addr: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None,
                 server_name: Optional[str] = None, timeout: Optional[float] = None):
        self.target = resolve(state_dir=resolve_state_dir(state_dir), socket_path=socket, addr=addr,
                              token=token, ca=ca, server_name=server_name)
        self._t = Transport(self.target, timeout=timeout)
        self.functions = Functions(self._t)
        self.sandboxes = Sandboxes(self._t)
        self.checkpoints = Checkpoints(self._t)

    @property
    def where(self) -> str:
        """The unix socket's path or the TCP address this client talks to ("https://host:port"
        for TLS)."""
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

