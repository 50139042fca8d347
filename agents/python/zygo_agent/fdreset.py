"""Rule 9: a child inherits no live kernel object it shares with the zygote.

After ``fork()`` every descriptor in the child refers to the same open file description as the
zygote's. A socket written from two processes interleaves their bytes (case BH-15: one TLS
session, two writers, "bad record mac"); an epoll instance delivers one process's events to the
other and ``epoll_ctl`` from the child edits the zygote's interest list (case BH-14).

:func:`reset_inherited` therefore swaps, with ``dup2`` so that the fd numbers held by Python
objects stay valid:

- every socket for a fresh, unconnected socket of the same family, type and protocol (using it
  fails with ``ENOTCONN`` or similar, so a client library reconnects);
- every ``eventpoll``, ``eventfd``, ``signalfd``, ``timerfd``, ``inotify`` and ``io_uring``
  descriptor for ``/dev/null``;

and then resets the asyncio policy. Nothing here calls ``epoll_ctl``, ``shutdown`` or
``loop.close()`` on an inherited object: the replaced objects are kept referenced in
``_graveyard`` so that no finaliser runs on them, and the child leaves with ``os._exit``.
Pipes and regular files are left alone (rule 9 does not cover them).
"""

import os
import socket
import sys
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

_EVENT_KINDS = ("anon_inode:[eventpoll]", "anon_inode:[eventfd]", "anon_inode:[signalfd]",
                "anon_inode:[timerfd]", "anon_inode:inotify", "anon_inode:[io_uring]")

_graveyard: List[object] = []  # inherited objects that must never be finalised


class SocketInfo(NamedTuple):
    """What :func:`probe_socket` learns about a socket descriptor."""
    family: int
    type: int
    proto: int
    local: object
    peer: object  # None when not connected


def open_fds() -> List[Tuple[int, str]]:
    """Return ``(fd, link target)`` for every open descriptor, from ``/proc/self/fd``.

    Descriptors whose link cannot be read (the directory handle used for the listing) are
    skipped. Raises ``OSError`` if ``/proc/self/fd`` cannot be listed.
    """
    result = []
    for name in os.listdir("/proc/self/fd"):
        try:
            result.append((int(name), os.readlink("/proc/self/fd/" + name)))
        except (OSError, ValueError):
            continue
    return sorted(result)


def kind_of(target: str) -> Optional[str]:
    """Return ``"socket"``, ``"event"`` (an event-loop descriptor) or ``None`` for the
    ``/proc/self/fd`` link target ``target``."""
    if target.startswith("socket:"):
        return "socket"
    if target.startswith(_EVENT_KINDS):
        return "event"
    return None


def probe_socket(fd: int) -> SocketInfo:
    """Return the family, type, protocol and addresses of socket ``fd`` without changing it.

    Works on a duplicate descriptor and with the default socket timeout cleared, so the open
    file description's ``O_NONBLOCK`` flag (shared with the zygote) is never touched. Raises
    ``OSError`` if ``fd`` is not a socket.
    """
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(None)
    try:
        probe = socket.socket(fileno=os.dup(fd))
    finally:
        socket.setdefaulttimeout(saved)
    with probe:
        try:
            local = probe.getsockname()
        except OSError:
            local = None
        try:
            peer = probe.getpeername()
        except OSError:
            peer = None
        return SocketInfo(probe.family, probe.type, probe.proto, local, peer)


def reset_inherited(keep: Iterable[int] = ()) -> Dict[str, int]:
    """Replace every inherited socket and event-loop descriptor (except those in ``keep``)
    and reset asyncio. Returns counts ``{"sockets": n, "event_fds": m}``.

    Raises ``OSError`` if ``/proc/self/fd`` or ``/dev/null`` cannot be opened or a ``dup2``
    fails; the caller must then not run user code.
    """
    keep = set(keep)
    counts = {"sockets": 0, "event_fds": 0}
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    try:
        for fd, target in open_fds():
            kind = kind_of(target)
            if fd in keep or fd == devnull or kind is None:
                continue
            if kind == "socket":
                _replace_socket(fd, devnull)
                counts["sockets"] += 1
            else:
                _replace(fd, devnull)
                counts["event_fds"] += 1
    finally:
        os.close(devnull)
    reset_asyncio()
    return counts


def reset_asyncio() -> None:
    """Forget the event loop and policy inherited from the zygote, if asyncio is imported.

    The old policy and loop are kept referenced (never closed: closing would ``epoll_ctl`` and
    close descriptors by number), the running-loop marker is cleared, and the default policy
    is restored, so ``asyncio.get_event_loop()`` and ``asyncio.run`` make a new loop.
    Returns nothing.
    """
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return
    events = asyncio.events
    policy = events._event_loop_policy
    if policy is not None:
        _graveyard.append(policy)
        loop = getattr(getattr(policy, "_local", None), "_loop", None)
        if loop is not None:
            _graveyard.append(loop)
    events._set_running_loop(None)
    asyncio.set_event_loop_policy(None)


def _replace(fd: int, source: int) -> None:
    inheritable = os.get_inheritable(fd)
    os.dup2(source, fd, inheritable=inheritable)


def _replace_socket(fd: int, devnull: int) -> None:
    blocking = os.get_blocking(fd)
    try:
        info = probe_socket(fd)
        fresh = socket.socket(info.family, info.type, info.proto)
    except OSError:
        # A family we may not create here (AF_PACKET without CAP_NET_RAW, ...): /dev/null
        # still cuts the shared object off; use then fails with ENOTSOCK.
        _replace(fd, devnull)
        return
    with fresh:
        _replace(fd, fresh.fileno())
    os.set_blocking(fd, blocking)
