"""Where the client finds the daemon: the zygo CLI's rules (internal/cli/context.go).

Each setting comes from the first of: the argument, an environment variable, the context
file, a default:

    address      addr=         $ZYGO_ADDR     address       the unix socket of the state dir
                 (socket=, a unix socket's path, stands for addr=)
    token        token=        $ZYGO_TOKEN    token         api.token in the state dir, if readable
    CA file      ca=           $ZYGO_CA       ca            the system's roots
    server name  server_name=  -              server_name   the address's host

The context file is $XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml; a
missing file is no error, a key it does not know is, and so is a file holding a token that
group or others may read. Its token and server name go only to its own address, never to
one given by argument or $ZYGO_ADDR. An address is host:port (plain HTTP, for a loopback
daemon; TLS when a CA or server name is set), https://host:port (TLS) or http://host:port
(plain HTTP).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from . import errors

#: The keys a context file may hold.
CONTEXT_KEYS = ("address", "token", "ca", "server_name")


def context_path() -> Optional[str]:
    """The context file's path; None when neither $XDG_CONFIG_HOME nor the home directory
    is known."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return os.path.join(xdg, "zygo", "config.toml")
    home = os.path.expanduser("~")
    if home == "~":
        return None
    return os.path.join(home, ".config", "zygo", "config.toml")


def load_context(path: Optional[str]) -> Dict[str, str]:
    """The context file at path as {key: value} (empty when it does not exist), its ca made
    absolute (relative to the file). Raises ConfigError naming the file: it does not parse,
    holds an unknown key or a value that is not a string, or holds a token and is readable
    by group or others (POSIX)."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            raw = f.read()
            mode = os.fstat(f.fileno()).st_mode
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise errors.ConfigError(f"reading the context file {path}: {e}") from e
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise errors.ConfigError(f"reading the context file {path} needs Python 3.11 or later (tomllib)") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise errors.ConfigError(f"reading the context file {path}: {e}") from e
    for key, value in doc.items():
        if key not in CONTEXT_KEYS:
            raise errors.ConfigError(f"the context file {path}: unknown key {key!r} (known: {', '.join(CONTEXT_KEYS)})")
        if not isinstance(value, str):
            raise errors.ConfigError(f"the context file {path}: {key} must be a string")
    if doc.get("token") and os.name == "posix" and stat.S_IMODE(mode) & 0o077:
        raise errors.ConfigError(f"the context file {path} holds a token and has mode {stat.S_IMODE(mode):o}: chmod 600 it")
    if doc.get("ca") and not os.path.isabs(doc["ca"]):  # relative to the file, not to where this runs
        doc["ca"] = os.path.join(os.path.dirname(path), doc["ca"])
    return doc


def _first(*pairs: Tuple[Optional[str], str]) -> Tuple[str, str]:
    """The first non-empty (value, where it came from) of pairs; ("", "") when all are empty."""
    for value, where in pairs:
        if value:
            return value, where
    return "", ""


@dataclass
class Target:
    """The daemon a client talks to. ``addr`` is "" for the unix socket at ``socket_path``;
    else host:port, with ``tls``, ``ca`` (a CA file; "" for the system's roots) and
    ``server_name`` ("" for the host). ``token`` ("" for none) came from ``token_from``
    ("token=", "$ZYGO_TOKEN", the context file's or the token file's path); ``addr_from``
    is "addr=", "$ZYGO_ADDR" or the context file's path."""

    socket_path: str = ""
    addr: str = ""
    addr_from: str = ""
    tls: bool = False
    ca: str = ""
    ca_from: str = ""
    server_name: str = ""
    token: str = ""
    token_from: str = ""
    context_path: str = ""


def resolve(*, state_dir: str, socket_path: Optional[str], addr: Optional[str], token: Optional[str],
            ca: Optional[str], server_name: Optional[str]) -> Target:
    """Works out the Target from the arguments, the environment and the context file (see
    the top of this module). state_dir is already resolved. Raises ConfigError for a bad
    context file or an address that does not parse (naming where it came from)."""
    path = context_path()
    cf = load_context(path)
    t = Target(context_path=path or "")
    if socket_path and not addr:  # an explicit socket is an explicit address
        return Target(socket_path=socket_path, context_path=t.context_path)
    t.addr, t.addr_from = _first((addr, "addr="), (os.environ.get("ZYGO_ADDR"), "$ZYGO_ADDR"),
                                 (cf.get("address"), str(path)))
    t.ca, t.ca_from = _first((ca, "ca="), (os.environ.get("ZYGO_CA"), "$ZYGO_CA"), (cf.get("ca"), str(path)))
    # The file's token and server name belong to its address: one given by argument or
    # environment never receives them (a token is sent only where it was meant to go).
    ctx_token = ""
    t.server_name = server_name or ""
    if cf.get("address") and (t.addr_from == str(path) or t.addr == cf["address"]):
        ctx_token = cf.get("token", "")
        t.server_name = t.server_name or cf.get("server_name", "")
    if not t.addr:
        t.socket_path = os.path.join(state_dir, "zygo.sock")
        return t
    t.addr, t.tls = parse_addr(t.addr, t.addr_from, bool(t.ca or t.server_name))
    t.token, t.token_from = _first((token, "token="), ((os.environ.get("ZYGO_TOKEN") or "").strip(), "$ZYGO_TOKEN"),
                                   (ctx_token, str(path)))
    if not t.token:
        tf = os.path.join(state_dir, "api.token")
        try:
            with open(tf, encoding="utf-8") as f:
                t.token = f.read().strip()
            t.token_from = tf if t.token else ""
        except OSError:
            pass
    return t


def parse_addr(addr: str, where: str, tls_asked: bool) -> Tuple[str, bool]:
    """Splits the scheme off addr and returns (host:port, whether to speak TLS): https://
    is TLS, http:// plain, none TLS when tls_asked (a CA or server name is set). Raises
    ConfigError naming where (the argument, the variable or the file) the address came from."""
    sp = "" if where.endswith("=") else " "  # addr='x', $ZYGO_ADDR 'x'
    rest = addr
    https = rest.startswith("https://")
    if https:
        rest = rest[len("https://"):]
    plain = rest.startswith("http://")
    if plain:
        rest = rest[len("http://"):]
    if "://" in rest:
        raise errors.ConfigError(f"{where}{sp}{addr!r}: want host:port, https://host:port or http://host:port")
    rest = rest.rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535 or (":" in host and not host.startswith("[")):
        raise errors.ConfigError(f"{where}{sp}{addr!r}: want host:port (a port of 0..65535; an IPv6 host in brackets)")
    return rest, https or (not plain and tls_asked)
