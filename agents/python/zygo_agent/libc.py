"""The few C library calls the agent makes through ctypes.

The library handle is opened when this module is imported, in the zygote, so a child never
runs the dynamic loader after ``fork()``.
"""

import ctypes
import errno
import os

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4  # Python 3.11 has no constant for it.

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int
_libc.fflush.argtypes = [ctypes.c_void_p]
_libc.fflush.restype = ctypes.c_int


def fflush_all() -> None:
    """Flush every C stdio output stream (``fflush(NULL)``). Returns nothing; ignores errors."""
    _libc.fflush(None)


def set_dumpable(dumpable: bool) -> None:
    """Set ``PR_SET_DUMPABLE``. Returns nothing; raises ``OSError`` if prctl fails."""
    if _libc.prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_DUMPABLE): " + os.strerror(err))


def is_dumpable() -> bool:
    """Return the process's ``PR_GET_DUMPABLE`` flag; raises ``OSError`` if prctl fails."""
    value = _libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    if value < 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_GET_DUMPABLE): " + os.strerror(err))
    return value != 0


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp_filter(program: bytes) -> None:
    """Install a classic-BPF seccomp filter (``struct sock_filter`` array, 8 bytes per
    instruction) on the calling thread, after setting ``PR_SET_NO_NEW_PRIVS``, as
    Documentation/userspace-api/seccomp_filter.rst requires of an unprivileged process.
    Filters stack: the kernel applies every installed filter and takes the strictest
    answer. Returns nothing; raises ``ValueError`` for a malformed program and ``OSError``
    if prctl fails."""
    if not program or len(program) % 8 or len(program) // 8 > 4096:
        raise ValueError(f"seccomp program of {len(program)} bytes is not a sock_filter array")
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(err))
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_SECCOMP): " + os.strerror(err))


# Landlock (Documentation/userspace-api/landlock.rst). The three syscalls came after the
# syscall tables were unified, so they have the same numbers on x86_64, aarch64 and every
# other architecture of the generic table.
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_ACCESS_FS_EXECUTE = 1 << 0  # ABI 1: execute a file
LANDLOCK_ACCESS_FS_WRITE_FILE = 1 << 1  # ABI 1: open a file for writing
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2  # ABI 1: open a file for reading
LANDLOCK_ACCESS_FS_READ_DIR = 1 << 3  # ABI 1: open a directory to list it
LANDLOCK_ACCESS_FS_REMOVE_DIR = 1 << 4  # ABI 1, as the rest up to MAKE_SYM
LANDLOCK_ACCESS_FS_REMOVE_FILE = 1 << 5
LANDLOCK_ACCESS_FS_MAKE_CHAR = 1 << 6
LANDLOCK_ACCESS_FS_MAKE_DIR = 1 << 7
LANDLOCK_ACCESS_FS_MAKE_REG = 1 << 8
LANDLOCK_ACCESS_FS_MAKE_SOCK = 1 << 9
LANDLOCK_ACCESS_FS_MAKE_FIFO = 1 << 10
LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 11
LANDLOCK_ACCESS_FS_MAKE_SYM = 1 << 12
# ABI 2: link or rename into another directory. A domain that handles any file access
# refuses every such reparenting (EXDEV) unless it handles this right too and grants it at
# both ends, so it is handled and granted wherever writing is.
LANDLOCK_ACCESS_FS_REFER = 1 << 13
LANDLOCK_WRITE = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REFER  # granted together
LANDLOCK_ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
# Every right that changes the filesystem (ABI 3): open for writing, truncate, make, remove,
# rename or link anything.
LANDLOCK_CHANGE = (LANDLOCK_WRITE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_REMOVE_DIR
                   | LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR
                   | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG
                   | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO
                   | LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM)
# The rights a rule on a single file (not a directory) may hold; the kernel refuses the rest.
LANDLOCK_FILE_RIGHTS = (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE
                        | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE)
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
LANDLOCK_SCOPE_SIGNAL = 1 << 1
LANDLOCK_SCOPED_ABI = 6  # the first ABI with ``scoped`` (Linux 6.12)

_libc.syscall.restype = ctypes.c_long


class _LandlockRulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _LandlockPathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_abi = [None]  # the kernel's Landlock ABI once asked (a property of the kernel: children inherit it)


def landlock_abi() -> int:
    """Return the kernel's Landlock ABI version (1 and up), or 0 when the kernel has no
    Landlock (``ENOSYS``) or it is not enabled at boot (``EOPNOTSUPP``). The answer is kept
    (the zygote's warm-up asks first, so a child makes no system call for it). Raises
    ``OSError`` for any other failure (a seccomp filter refusing the call with ``EPERM``,
    say); a failure is not kept."""
    if _abi[0] is not None:
        return _abi[0]
    value = _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if value < 0:
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, "landlock_create_ruleset(VERSION): " + os.strerror(err))
        value = 0
    _abi[0] = value
    return value


def landlock_ruleset(handled_fs: int, handled_net: int = 0, scoped: int = 0) -> int:
    """Create a Landlock ruleset handling ``handled_fs`` and ``handled_net`` access and
    scoping ``scoped`` (``LANDLOCK_SCOPE_*``). Returns its descriptor (close-on-exec), which
    the caller owns and closes. Raises ``OSError``."""
    attr = _LandlockRulesetAttr(handled_fs, handled_net, scoped)
    fd = _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                       ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, "landlock_create_ruleset: " + os.strerror(err))
    return fd


def landlock_allow(ruleset: int, path: str, access: int, directory: bool = True) -> None:
    """Add a ``LANDLOCK_RULE_PATH_BENEATH`` rule granting ``access`` beneath ``path`` (a
    directory, or with ``directory`` false also a single file) to the ruleset descriptor
    ``ruleset``; a missing ``path`` is skipped. Raises ``OSError``."""
    flags = os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        target = os.open(path, flags)
    except FileNotFoundError:
        return
    try:
        rule = _LandlockPathBeneathAttr(access, target)
        if _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                         ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                         ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): " + os.strerror(err))
    finally:
        os.close(target)


def landlock_restrict(ruleset: int) -> None:
    """Set ``PR_SET_NO_NEW_PRIVS`` (``landlock_restrict_self`` requires it of a process
    without ``CAP_SYS_ADMIN``; bubblewrap has set it already in a sandbox) and enter the
    domain of the ruleset descriptor ``ruleset`` (not closed: the caller owns it). Only the
    calling thread is restricted. Raises ``OSError``."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(err))
    if _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset),
                     ctypes.c_uint32(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "landlock_restrict_self: " + os.strerror(err))
