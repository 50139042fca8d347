"""Runtime pools: the zygote imports only the pool's preloads; each request brings a
tenant's script, loaded in the forked child after ``go`` (docs/protocol.md, "Pool requests").

A pool's code directory holds one generated module, ``zygo_pool_boot.py``, whose import is
the pool's import (``import numpy`` for ``preload = ["numpy"]``) and whose ``handler`` is
:data:`handler` below. :mod:`child` gives the ``go`` message (and the descriptor attached to
it) to :meth:`PoolHandler.zygo_bind_request`, which returns the request's real handler: a
callable that, once :func:`child._prepare` has run (stdio, reseed, ``TMPDIR``, Landlock,
strict filter), confines the request's writes to its own request directory, loads the
tenant's entry point from the script and calls it. Nothing of the script is in the zygote:
the text is read by the child alone, from

- ``/proc/self/fd/N``, the root of a detached read-only mount of the script's directory
  that the daemon made (``open_tree``) and attached to ``go`` (``script.mounted``); ``..``
  at the root of a detached mount stays there, so nothing else of the host is reachable
  through it; or
- ``DIR/script``, files the daemon wrote into the request directory, when it could make no
  mount (a daemon that is not root); the daemon logs that for the request.
"""

import errno
import importlib
from importlib import _bootstrap_external
import os
import platform
import struct
import sys
from typing import Callable, Sequence

from . import child, libc

# Every right that changes the filesystem: handled by a pool request's domain, granted only
# beneath its request directory, so nothing one tenant's request leaves in the sandbox's
# shared /tmp or /dev/shm (a file, a directory, a symlink whose target carries data, a
# socket or FIFO) can be read by the next request, whoever it belongs to.
CONFINED_RIGHTS = libc.LANDLOCK_CHANGE
# What a shared pool's request gets of them beneath its own directory: all but making a unix
# socket. Connecting to a pathname socket needs no Landlock right this kernel offers, and a
# socket's path leaks (/proc/net/unix), so a socket one tenant's request listened on could be
# reached by another tenant's; so no request of a shared pool can bind one anywhere.
SHARED_GRANTED = CONFINED_RIGHTS & ~libc.LANDLOCK_ACCESS_FS_MAKE_SOCK
# Devices a request may still open for writing: they hold nothing another request can read.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
_CONFINED_ABI = 3  # TRUNCATE is in CONFINED_RIGHTS

# Landlock network rights (ABI 4) and scopes (ABI 6). A shared pool's request handles both
# TCP rights and allows no port, and scopes abstract unix sockets and signals to its domain.
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
SHARED_NET_RIGHTS = _NET_BIND_TCP | _NET_CONNECT_TCP
SHARED_SCOPES = libc.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | libc.LANDLOCK_SCOPE_SIGNAL
SHARED_ABI = 6  # the first ABI with both network rules and scopes (Linux 6.12)


class SharedPoolUnsupported(OSError):
    """The kernel's Landlock is older than :data:`SHARED_ABI`: a request of a shared pool
    cannot be kept from other tenants' requests, so it does not run."""


# What PoolHandler.zygo_prewarm compiles: the constructs a script's module typically has.
_PREWARM_SOURCE = '''"""A module."""
import os
LIMIT = 1 << 10
class Box:
    def get(self, key, *rest, **options):
        return {"key": key, "rest": [r for r in rest if r], "o": f"{options!r:>4}"}
def handler(event, context):
    n = int(event.get("n", 1000))
    try:
        total = sum(i * 2.5 for i in range(n)) if n else None
    except (ValueError, KeyError) as exc:
        raise RuntimeError(str(exc)) from exc
    print(f"{context.request_id}: {n}")
    return {"n": n, "total": total, "name": "x" + str(n), "ok": True, "none": None}
'''


class ScriptError(Exception):
    """The go message's script is malformed (a protocol error, not the tenant's)."""


class PoolHandler:
    """The pool's handler object (``zygo_pool_boot.handler``). Called directly it is an
    error: a pool request always comes with a script."""

    def __call__(self, event, context):
        raise ScriptError("this pool request came without a script")

    def zygo_prewarm(self) -> None:
        """Before ``go`` (:func:`child._prewarm`), what a request's script path does not need
        the request for: the ruleset of its nested domain with the device rules
        (:func:`prepare_confine`), and one compile and one lookup in a directory of the
        kind an import makes, so that the copy-on-write faults of the compiler's and
        importlib's first use in this child are paid while it waits (measured: docs/
        BENCHMARKS.md, fifth round). Nothing of a tenant is touched. Raises ``OSError``."""
        prepare_confine(shared=True)
        compile(_PREWARM_SOURCE, "<zygo-prewarm>", "exec", dont_inherit=True)
        finder = _bootstrap_external.FileFinder(
            os.path.dirname(__file__), *_bootstrap_external._get_supported_file_loaders())
        finder.find_spec("zygo_prewarm_absent")

    def zygo_bind_request(self, go) -> Callable:
        """Return the handler of the request ``go`` (:class:`child._Go`: ``body`` and
        ``fds``): :func:`run_script` bound to its script, with ``zygo_read_beneath``, the
        directories the request's domain must let it read (the script's mount, when it came
        as a descriptor). Takes ownership of ``go.fds``.
        Raises :class:`ScriptError` for a go without a valid ``script`` member."""
        script = go.body.get("script")
        if not isinstance(script, dict):
            _close(go.fds)
            raise ScriptError("go: script is missing")
        entry, mounted = script.get("entry"), script.get("mounted") is True
        if not isinstance(entry, str) or entry.count(":") != 1:
            _close(go.fds)
            raise ScriptError(f"go: script entry {entry!r} is not MODULE:FUNCTION")
        if mounted:
            if len(go.fds) != 1:
                _close(go.fds)
                raise ScriptError(f"go: a mounted script carries 1 descriptor, not {len(go.fds)}")
            root = f"/proc/self/fd/{go.fds[0]}"
        else:
            _close(go.fds)
            root = os.path.join(go.dir, "script")
        tenant, digest = str(script.get("tenant") or ""), str(script.get("hash") or "")
        shared = script.get("shared") is not False  # absent: the closed side

        def handler(event, context):
            context.tenant, context.script = tenant, digest
            return run_script(root, entry, go.dir, event, context, shared=shared)
        # A detached mount is beneath nothing the request's Landlock domain grants: the
        # domain grants reading beneath it too (child.enter_own_domain).
        handler.zygo_read_beneath = (root,) if mounted else ()
        return handler


def run_script(root: str, entry: str, request_dir: str, event, context, shared: bool = True):
    """Confine the request's writes to ``request_dir`` (:func:`confine`; with ``shared``, a
    request of a shared pool's zygote, its network and IPC too), import the module
    of ``entry`` (``MODULE:FUNCTION``, FUNCTION a dotted path) from ``root`` and return what
    the function returns for ``(event, context)``. Whatever the script raises (its import
    included) propagates: the request's result is then the tenant's error, with its
    traceback."""
    confine(request_dir, shared=shared)
    if shared:
        install_shared_filter()
    child._lap("script.confine")
    sys.dont_write_bytecode = True  # the mount is read-only; nothing is cached anywhere
    sys.path.insert(0, root)
    module_name, _, attr_path = entry.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"entry {entry!r} is a {type(obj).__name__}, not a function")
    child._lap("script.import")
    return obj(event, context)


def confine(request_dir: str, devices: Sequence[str] = WRITABLE_DEVICES,
            shared: bool = False) -> bool:
    """Enter a nested Landlock domain that handles every right changing the filesystem
    (:data:`CONFINED_RIGHTS`) and grants them only beneath ``request_dir`` (its ``tmp/`` is
    the request's ``TMPDIR`` and ``HOME``), plus writing to ``devices``. With ``shared`` (a
    request of a shared pool's zygote, whose children share one network and IPC namespace
    with other tenants' requests) the domain also handles TCP bind and connect with no port
    allowed (:data:`SHARED_NET_RIGHTS`), scopes abstract unix sockets and signals
    (:data:`SHARED_SCOPES`), and grants no unix socket's making (:data:`SHARED_GRANTED`), so
    nothing outside the domain can be reached that way and nothing in it listens for
    another tenant.

    Returns True once confined, False when the kernel's Landlock is older than ABI 3 and not
    ``shared`` (the pool's ``landlock`` warm-up check says so; the request then runs with the
    function-level domain only). Raises :class:`SharedPoolUnsupported` for ``shared`` on a
    kernel older than :data:`SHARED_ABI`, ``OSError`` when Landlock refuses."""
    abi = libc.landlock_abi()
    if shared and abi < SHARED_ABI:
        raise SharedPoolUnsupported(errno.ENOSYS, (
            f"isolation: a shared pool needs Landlock ABI {SHARED_ABI} (Linux 6.12) to keep "
            f"tenants apart and this kernel has ABI {abi}; use isolation = "
            '"zygote-per-tenant" or a newer kernel'))
    if abi < _CONFINED_ABI:
        return False
    net, scoped = (SHARED_NET_RIGHTS, SHARED_SCOPES) if shared else (0, 0)
    fd = _take_ruleset(net, scoped, tuple(devices))
    try:
        libc.landlock_allow(fd, request_dir, SHARED_GRANTED if shared else CONFINED_RIGHTS,
                            directory=False)
        libc.landlock_restrict(fd)
    finally:
        os.close(fd)
    return True


_ahead = {}  # (net, scoped, devices) -> a ruleset descriptor made before go (prepare_confine)


def _new_ruleset(net: int, scoped: int, devices: Sequence[str]) -> int:
    """A ruleset of a pool request's domain with the rules of ``devices``; the caller owns
    the descriptor. Raises ``OSError``."""
    fd = libc.landlock_ruleset(CONFINED_RIGHTS, net, scoped)
    try:
        for device in devices:
            libc.landlock_allow(fd, device, CONFINED_RIGHTS & libc.LANDLOCK_FILE_RIGHTS,
                                directory=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _take_ruleset(net: int, scoped: int, devices: Sequence[str]) -> int:
    """The ruleset :func:`prepare_confine` made for these arguments (taken: the caller
    closes it), or a new one. Any other ruleset made ahead is closed: none reaches the
    script."""
    fd = _ahead.pop((net, scoped, devices), None)
    for other in _ahead.values():
        os.close(other)
    _ahead.clear()
    return fd if fd is not None else _new_ruleset(net, scoped, devices)


def prepare_confine(shared: bool = True, devices: Sequence[str] = WRITABLE_DEVICES) -> None:
    """Before ``go``: make the ruleset :func:`confine` will enter, with the rules that do not
    depend on the request (the devices); :func:`confine` adds the request directory's rule
    and enters it. Nothing is entered here. Raises ``OSError``."""
    if libc.landlock_abi() < (SHARED_ABI if shared else _CONFINED_ABI):
        return
    net, scoped = (SHARED_NET_RIGHTS, SHARED_SCOPES) if shared else (0, 0)
    key = (net, scoped, tuple(devices))
    if key not in _ahead:
        _ahead[key] = _new_ruleset(net, scoped, devices)


# seccomp (Documentation/userspace-api/seccomp_filter.rst): struct seccomp_data offsets,
# classic BPF opcodes and return values.
_SECCOMP_NR, _SECCOMP_ARCH, _SECCOMP_ARG0 = 0, 4, 16
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_EACCES = 0x00050000 | errno.EACCES
_AF_UNIX = 1
_X32_BIT = 0x40000000
# Per architecture: its AUDIT_ARCH value and the numbers of socket() and of every call that
# makes or opens an IPC object the namespace shares (SysV msgget/semget/shmget, POSIX
# mq_open) or an io_uring (whose IORING_OP_SOCKET makes sockets without socket()).
_SHARED_ARCHES = {
    "x86_64": (0xC000003E, 41, (68, 64, 29, 240, 425)),
    "aarch64": (0xC00000B7, 198, (186, 190, 194, 180, 425)),
}


def shared_filter(machine: str = "") -> bytes:
    """Return the seccomp program (``struct sock_filter`` array) of a shared pool's request
    on ``machine`` (``platform.machine()`` when empty): ``socket()`` of any family but
    ``AF_UNIX`` (IP, UDP included, netlink, packet, vsock...) and every call of the IPC
    namespace (SysV message queues, semaphores and shared memory, POSIX message queues) and
    ``io_uring_setup`` fail with ``EACCES``; a syscall of another ABI (x32, the 32-bit entry
    points) kills the process. Raises ``SharedPoolUnsupported`` on another architecture."""
    machine = machine or platform.machine()
    if machine not in _SHARED_ARCHES:
        raise SharedPoolUnsupported(errno.ENOSYS, (
            f"isolation: a shared pool has no seccomp filter for {machine}; use isolation = "
            '"zygote-per-tenant"'))
    arch, nr_socket, refused = _SHARED_ARCHES[machine]
    prog = [(_BPF_LD_W_ABS, 0, 0, _SECCOMP_ARCH),
            (_BPF_JEQ_K, 1, 0, arch),
            (_BPF_RET_K, 0, 0, _RET_KILL_PROCESS),
            (_BPF_LD_W_ABS, 0, 0, _SECCOMP_NR),
            (_BPF_JGE_K, 0, 1, _X32_BIT),
            (_BPF_RET_K, 0, 0, _RET_KILL_PROCESS)]
    for nr in refused:  # jump to the EACCES at the end
        prog.append((_BPF_JEQ_K, 0, 0, nr))
    prog += [(_BPF_JEQ_K, 1, 0, nr_socket),
             (_BPF_RET_K, 0, 0, _RET_ALLOW),
             (_BPF_LD_W_ABS, 0, 0, _SECCOMP_ARG0),
             (_BPF_JEQ_K, 0, 1, _AF_UNIX),
             (_BPF_RET_K, 0, 0, _RET_ALLOW),
             (_BPF_RET_K, 0, 0, _RET_EACCES)]
    eacces = len(prog) - 1
    first = 6
    for i in range(len(refused)):  # jt counts from the next instruction
        code, _, jf, k = prog[first + i]
        prog[first + i] = (code, eacces - (first + i) - 1, jf, k)
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


try:  # built once, in the zygote (this module is the pool's boot import)
    _SHARED_FILTER = shared_filter()
except SharedPoolUnsupported:
    _SHARED_FILTER = b""  # install_shared_filter raises the reason


def install_shared_filter() -> None:
    """Install :func:`shared_filter` on this process (and what it starts). Raises
    ``SharedPoolUnsupported`` or ``OSError``."""
    libc.install_seccomp_filter(_SHARED_FILTER or shared_filter())


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


handler = PoolHandler()
