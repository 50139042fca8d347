"""Rule 9: a child inherits no live kernel object it shares with the zygote.

After ``fork()`` every descriptor in the child refers to the same open file description as the
zygote's. A socket written from two processes interleaves their bytes (case BH-15: one TLS
session, two writers, "bad record mac"); an epoll instance delivers one process's events to the
other and ``epoll_ctl`` from the child edits the zygote's interest list (case BH-14); a pipe to
a helper process started at import hands one request's reply to another; a file opened at
import shares its offset, so successive requests read successive records.

Every descriptor therefore has a policy, decided at warm-up (:func:`plan_inherited`, reported
by the ``descriptors`` check) and applied in each fork-mode child before user code
(:func:`reset_inherited`), always with ``dup2`` so that the fd numbers held by Python objects
stay valid:

- an ``AF_INET``/``AF_INET6`` socket or any datagram socket becomes a fresh, unconnected
  socket of the same family, type and protocol (TCP then fails with ``ENOTCONN`` on ``recv``
  and ``EPIPE`` on ``send``, so a client library reconnects; a datagram socket is unbound:
  ``send`` fails with ``ENOTCONN``/``EDESTADDRREQ``, ``sendto`` works and only this child gets
  the answers); an ``AF_UNIX`` stream or seqpacket socket becomes a dead descriptor (below),
  since a fresh one answers ``recv`` with an unhelpful ``EINVAL``;
- the write end of a pipe or FIFO becomes the write end of a pipe nobody reads: ``write``
  fails with ``EPIPE`` (``BrokenPipeError``), as when the peer has gone;
- a terminal is a two-way channel to a peer like a pipe (a helper started at import on a
  pseudo-terminal, as ``pexpect`` does, answers whichever request reads first): a pty master
  (``/dev/ptmx``, 5:2) or slave (``/dev/pts/N``, majors 136-143), ``/dev/tty``, ``/dev/console``
  and every other tty-class device gets the pipe policy by access mode (write-only: the dead
  writer; otherwise: a dead descriptor); so does any character device but the five that hold
  nothing of a peer's (``/dev/null``, ``zero``, ``full``, ``random``, ``urandom``), since a
  device driver may be a channel too (``/dev/fuse``, ``/dev/net/tun``);
- the read end of a pipe or FIFO (or one opened read-write), and any other anonymous kernel
  object (``pidfd``, ``userfaultfd``, ...), becomes a *dead* descriptor, an ``O_PATH`` handle on
  an empty memfd named ``zygo-replaced`` (its ``/proc/self/fd`` link says so): every call on
  it but ``close``, ``fstat``, ``fcntl`` and ``dup`` — ``read``, ``write``, ``send``, ``recv``,
  ``getpeername``, ``epoll_ctl`` — fails with ``EBADF``, and ``poll`` reports ``POLLNVAL``;
- an ``eventpoll``, ``eventfd``, ``signalfd``, ``timerfd``, ``inotify`` or ``io_uring``
  descriptor becomes ``/dev/null``;
- a regular file or directory gets an open file description of its own: it is re-opened
  through its ``/proc/self/fd/N`` magic link (which names the inode itself, so no rename can
  put another file there; the result is checked to have the same ``st_dev``/``st_ino``) with
  the flags ``/proc/self/fdinfo`` reports (access mode, ``O_APPEND``, ``O_NONBLOCK``, ...) and
  the offset it had at warm-up. A file with no path (deleted, ``O_TMPFILE``, a memfd) gets its
  own offset too, but its content stays shared by every request: the warm-up report says so;
- ``/dev/null``, ``zero``, ``full``, ``random`` and ``urandom``, and a block device, are kept
  (no offset, data or peer of their own to share);
- an ``O_PATH`` handle follows what it names, since re-opening ``/proc/self/fd/N`` gives a
  new open file description of it: on a regular file or directory with a path, or one of the
  five devices above, it is kept (a nameless file is reported as shared content); on a pipe,
  FIFO, socket, terminal or any other device it becomes a dead descriptor.

Descriptors 1 and 2 are the agent's (pointed at the request's files); a descriptor the plan
does not know (opened after warm-up, by an at-fork hook) is decided in the child by the same
rules. Nothing here calls ``epoll_ctl``, ``shutdown`` or ``loop.close()`` on an inherited
object: the replaced objects are kept referenced in ``_graveyard`` so that no finaliser runs on
them, and the child leaves with ``os._exit``. In spawn mode (and the thread fallback) none of
this runs: the process that imported the code serves the request, and what it made is its own.
"""

import os
import socket
import stat
import sys
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

_EVENT_KINDS = ("anon_inode:[eventpoll]", "anon_inode:[eventfd]", "anon_inode:[signalfd]",
                "anon_inode:[timerfd]", "anon_inode:inotify", "anon_inode:[io_uring]")
_STDIO = (1, 2)  # pointed at the request's own files by child.redirect_stdio
# Character devices with no peer, state or offset of their own (major 1, "mem"): null, zero,
# full, random, urandom. Every other character device is treated as a channel.
_STATELESS_DEVICES = frozenset({(1, 3), (1, 5), (1, 7), (1, 8), (1, 9)})
# tty-class majors (Documentation/admin-guide/devices.txt): 2 and 3 BSD pty masters and slaves,
# 4 virtual consoles and serial ports, 5 /dev/tty (5:0), /dev/console (5:1), /dev/ptmx (5:2),
# 128-135 Unix98 pty masters, 136-143 Unix98 pty slaves (/dev/pts/N).
_TTY_MAJORS = frozenset({2, 3, 4, 5}) | frozenset(range(128, 144))
# The open(2) flags a re-open keeps; O_CREAT, O_EXCL, O_TRUNC and O_NOCTTY never reach f_flags.
_REOPEN_FLAGS = (os.O_ACCMODE | os.O_APPEND | os.O_NONBLOCK | os.O_DSYNC | os.O_SYNC
                 | os.O_DIRECT | os.O_NOATIME | os.O_LARGEFILE | os.O_DIRECTORY)

_UNTOUCHED = ("keep", "agent")  # the actions that leave the descriptor as it is
_graveyard: List[object] = []  # inherited objects that must never be finalised
_plan: Dict[int, "Entry"] = {}  # fd -> the warm-up decision (plan_inherited)
_done = False  # reset_inherited has run to the end in this process


class SocketInfo(NamedTuple):
    """What :func:`probe_socket` learns about a socket descriptor."""
    family: int
    type: int
    proto: int
    local: object
    peer: object  # None when not connected


class Entry(NamedTuple):
    """The policy for one descriptor.

    ``kind``: ``socket``, ``pipe``, ``fifo``, ``terminal``, ``event``, ``file``,
    ``directory``, ``device``, ``o_path``, ``anon`` or ``stdio``. ``action``: ``fresh-socket``, ``dead-writer``, ``dead``,
    ``devnull``, ``reopen``, ``keep`` or ``agent``. ``shared_content`` is true for a re-opened
    file no path reaches (its data is still shared by every request). ``flags`` (open flags)
    and ``offset`` (bytes) matter for ``reopen``; ``ident`` is ``(st_dev, st_ino)``.
    """
    fd: int
    kind: str
    target: str
    action: str
    flags: int = 0
    offset: int = 0
    ident: Tuple[int, int] = (0, 0)
    shared_content: bool = False

    def describe(self) -> str:
        """Return what a child sees, in a few words, for the warm-up report."""
        return _DESCRIPTIONS[self.action] + (
            "; its content is still shared by every request (no path reaches it)"
            if self.shared_content else "")


_DESCRIPTIONS = {
    "fresh-socket": "replaced by an unconnected socket (ENOTCONN/EPIPE until reconnected)",
    "dead-writer": "replaced by a pipe nobody reads (write: EPIPE)",
    "dead": "replaced by a dead descriptor (read/write/send/recv: EBADF)",
    "devnull": "replaced by /dev/null",
    "reopen": "re-opened in each child: own offset, same flags",
    "keep": "kept (nothing of its own to share)",
    "agent": "the agent's: pointed at the request's own stdout/stderr file",
}


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


def open_flags(fd: int) -> int:
    """Return the open file description's flags of ``fd`` (``/proc/self/fdinfo``, octal).
    Raises ``OSError`` if the fdinfo cannot be read, ``ValueError`` if it has no flags line."""
    with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    raise ValueError(f"fd {fd}: no flags in fdinfo")


def decide(fd: int, target: str) -> Entry:
    """Return the policy for descriptor ``fd`` whose link target is ``target``.
    Never changes the descriptor. Raises ``OSError`` if it cannot be inspected."""
    if fd in _STDIO:
        return Entry(fd, "stdio", target, "agent")
    kind = kind_of(target)
    if kind == "socket":
        try:
            info = probe_socket(fd)
        except OSError:
            return Entry(fd, "socket", target, "dead")
        # A fresh AF_UNIX stream socket answers recv with EINVAL, which says nothing: a
        # dead descriptor answers EBADF. TCP answers ENOTCONN; a datagram socket stays
        # usable for sendto, and only this child receives what is sent back to it.
        unix_stream = info.family == socket.AF_UNIX and info.type != socket.SOCK_DGRAM
        return Entry(fd, "socket", target, "dead" if unix_stream else "fresh-socket")
    if kind == "event":
        return Entry(fd, "event", target, "devnull")
    st = os.fstat(fd)
    mode = st.st_mode
    if target.startswith("anon_inode:"):
        return Entry(fd, "anon", target, "dead")
    flags = open_flags(fd)
    if flags & getattr(os, "O_PATH", 0o10000000):
        return _decide_o_path(target, st, flags)._replace(fd=fd)
    if stat.S_ISFIFO(mode):
        writer = flags & os.O_ACCMODE == os.O_WRONLY
        return Entry(fd, "pipe" if target.startswith("pipe:") else "fifo", target,
                     "dead-writer" if writer else "dead", flags)
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        nameless = not target.startswith("/") or target.endswith(" (deleted)") \
            or target.startswith("/memfd:")
        return Entry(fd, "file" if stat.S_ISREG(mode) else "directory", target, "reopen",
                     flags, offset, (st.st_dev, st.st_ino), nameless)
    if stat.S_ISCHR(mode):
        return _decide_char_device(fd, target, st.st_rdev, flags)
    if stat.S_ISBLK(mode):
        return Entry(fd, "device", target, "keep", flags)
    return Entry(fd, "anon", target, "dead", flags)


def _decide_o_path(target: str, st: os.stat_result, flags: int) -> Entry:
    """Return the policy for an ``O_PATH`` handle. The handle itself reads and writes
    nothing, but re-opening ``/proc/self/fd/N`` makes a new open file description of what
    it names: a pipe, FIFO, socket or character device reopens into the same channel as the
    zygote's (one request would read another's replies), and a nameless file (deleted, a
    memfd) into the same content. So the handle is kept only when it names a regular file or
    directory by a path (any request could open that path anyway) or a stateless device;
    a channel gets a dead descriptor, and a nameless file is kept and reported as shared."""
    fd = -1  # filled in by the caller's Entry
    mode = st.st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        nameless = not target.startswith("/") or target.endswith(" (deleted)") \
            or target.startswith("/memfd:")
        return Entry(fd, "o_path", target, "keep", flags, shared_content=nameless)
    if stat.S_ISCHR(mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) in _STATELESS_DEVICES:
        return Entry(fd, "o_path", target, "keep", flags)
    return Entry(fd, "o_path", target, "dead", flags)


def _decide_char_device(fd: int, target: str, rdev: int, flags: int) -> Entry:
    """Return the policy for a character device: kept when it has no peer (``/dev/null``
    and the like), otherwise that of a pipe by access mode (a terminal, or a driver that may
    be a channel), so no request reads another's replies or writes into its conversation."""
    dev = (os.major(rdev), os.minor(rdev))
    if dev in _STATELESS_DEVICES:
        return Entry(fd, "device", target, "keep", flags)
    kind = "terminal" if dev[0] in _TTY_MAJORS else "device"
    writer = flags & os.O_ACCMODE == os.O_WRONLY
    return Entry(fd, kind, target, "dead-writer" if writer else "dead", flags)


def plan_inherited(skip: Iterable[int] = ()) -> List[Entry]:
    """Decide, at warm-up, the policy of every open descriptor but those in ``skip`` (the
    agent's own, closed in each child), remember it for :func:`reset_inherited`, and return
    it. A descriptor that cannot be inspected gets ``dead``. Raises ``OSError`` if
    ``/proc/self/fd`` cannot be listed."""
    skip = set(skip)
    _plan.clear()
    for fd, target in open_fds():
        if fd in skip:
            continue
        try:
            entry = decide(fd, target)
        except (OSError, ValueError):
            entry = Entry(fd, "anon", target, "dead")
        _plan[fd] = entry
    return list(_plan.values())


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
    """Apply the warm-up plan (or, for a descriptor it does not know, the same rules) to every
    descriptor but 1, 2 and those in ``keep``, then reset asyncio. Runs once per process:
    a second call after a complete first one returns ``{}``. Returns counts by action.

    Raises ``OSError`` if ``/proc/self/fd`` cannot be listed or a replacement cannot be made;
    the caller must then not run user code. A file that cannot be re-opened (its mode now
    forbids it, its inode changed) becomes a dead descriptor and counts as ``reopen-failed``.
    """
    global _done
    if _done:
        return {}
    keep = tuple(keep)
    counts: Dict[str, int] = {}
    spares = None  # made at the first replacement: a child usually has none to make
    try:
        for fd, target in _open_fds_but(keep):
            if spares is not None and spares.owns(fd):
                continue
            entry = _plan.get(fd)
            if entry is None or entry.target != target:
                entry = decide(fd, target)
            action = entry.action
            if action not in _UNTOUCHED:
                if spares is None:
                    spares = _Spares()
                action = _apply(entry, spares)
            counts[action] = counts.get(action, 0) + 1
    finally:
        if spares is not None:
            spares.close()
    if "asyncio" in sys.modules:
        reset_asyncio()
    _done = True
    return counts


def _open_fds_but(keep) -> List[Tuple[int, str]]:
    """:func:`open_fds` without the descriptors in ``keep`` and ``_STDIO``, whose links are
    not read (a system call each, and nothing here is decided for them)."""
    result = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep or fd in _STDIO:
            continue
        try:
            result.append((fd, os.readlink("/proc/self/fd/" + name)))
        except OSError:  # the listing's own descriptor, closed by now
            continue
    result.sort()
    return result


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


class _Spares:
    """The replacement objects, made once per :func:`reset_inherited` and closed after."""

    def __init__(self):
        self._fds: Dict[str, int] = {}

    def owns(self, fd: int) -> bool:
        return fd in self._fds.values()

    def get(self, what: str) -> int:
        if what not in self._fds:
            self._fds[what] = _make_spare(what)
        return self._fds[what]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _make_spare(what: str) -> int:
    if what == "devnull":
        return os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    if what == "dead":
        memfd = os.memfd_create("zygo-replaced", os.MFD_CLOEXEC)
        try:
            return os.open(f"/proc/self/fd/{memfd}", os.O_PATH | os.O_CLOEXEC)
        finally:
            os.close(memfd)
    if what == "dead-writer":
        r, w = os.pipe2(os.O_CLOEXEC)
        os.close(r)
        return w
    raise ValueError(what)


def _apply(entry: Entry, spares: _Spares) -> str:
    """Apply ``entry`` to its descriptor; return the action taken."""
    fd = entry.fd
    if entry.action in ("keep", "agent"):
        return entry.action
    if entry.action == "fresh-socket":
        _replace_socket(fd, spares)
    elif entry.action == "reopen":
        if not _reopen(entry):
            _replace(fd, spares.get("dead"))
            return "reopen-failed"
    elif entry.action == "dead-writer":
        blocking = os.get_blocking(fd)
        _replace(fd, spares.get("dead-writer"))
        os.set_blocking(fd, blocking)  # only this child's copy: the spare pipe is its own
    else:
        _replace(fd, spares.get(entry.action))
    return entry.action


def _reopen(entry: Entry) -> bool:
    """Give ``entry.fd`` an open file description of its own (same inode, flags, offset).
    Returns False if the inode cannot be re-opened or is no longer the one planned."""
    flags = entry.flags & _REOPEN_FLAGS | os.O_CLOEXEC | os.O_NOCTTY
    if entry.kind == "file":  # O_TMPFILE's flag contains O_DIRECTORY's bit
        flags &= ~os.O_DIRECTORY
    try:
        fresh = os.open(f"/proc/self/fd/{entry.fd}", flags)
    except OSError:
        return False
    try:
        st = os.fstat(fresh)
        if (st.st_dev, st.st_ino) != entry.ident:
            return False
        os.lseek(fresh, entry.offset, os.SEEK_SET)
        _replace(entry.fd, fresh)
        return True
    except OSError:
        return False
    finally:
        os.close(fresh)


def _replace(fd: int, source: int) -> None:
    inheritable = os.get_inheritable(fd)
    os.dup2(source, fd, inheritable=inheritable)


def _replace_socket(fd: int, spares: _Spares) -> None:
    blocking = os.get_blocking(fd)
    try:
        info = probe_socket(fd)
        fresh = socket.socket(info.family, info.type, info.proto)
    except OSError:
        # A family we may not create here (AF_PACKET without CAP_NET_RAW, ...): a dead
        # descriptor still cuts the shared object off; use then fails with EBADF.
        _replace(fd, spares.get("dead"))
        return
    with fresh:
        _replace(fd, fresh.fileno())
    os.set_blocking(fd, blocking)
