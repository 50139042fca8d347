"""The few C library calls the agent makes through ctypes.

The library handle is opened when this module is imported, in the zygote, so a child never
runs the dynamic loader after ``fork()``.
"""

import ctypes
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
