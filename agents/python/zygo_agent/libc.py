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
