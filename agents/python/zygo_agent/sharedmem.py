"""Memory a child would share with the zygote and its siblings: ``MAP_SHARED`` regions.

``fork()`` copies private memory (copy-on-write) but a ``MAP_SHARED`` mapping stays the same
pages in every process: a region made at import with ``mmap.mmap(-1, n)`` (anonymous shared),
``multiprocessing.Value``/``Array`` (a deleted file in ``/dev/shm``), ``shared_memory``
(``/dev/shm/psm_*``), a memfd or a System V segment is writable by every request at once, a
channel from one request to the next.

:func:`plan_shared` (warm-up) finds, in ``/proc/self/smaps``, every mapping that is shared and
may be written (``VmFlags`` ``sh`` and ``mw``: a read-only mapping of a file opened read-only can
never become writable). Those that only inheritance reaches (anonymous, deleted, memfd,
System V, POSIX shared memory under ``/dev/shm``) are replaced in each fork-mode child before
user code by :func:`privatise`: the contents are copied into a memfd of the child's own, mapped
shared over the same addresses with the same protection. Python ``mmap`` objects, ctypes
pointers and NumPy arrays over the region keep working, on memory no sibling reaches (what
the request itself forks still shares it, as the import intended). A shared mapping of a file with a path is kept (every request
can open that file anyway) and named at warm-up.
"""

import ctypes
import os
import re
from typing import List, NamedTuple

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_SHARED, MAP_FIXED = 0x01, 0x10
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")

_plan: List["Region"] = []


class Region(NamedTuple):
    """One shared, writable mapping: ``start``/``end`` (addresses), ``perms`` (``rw-s``),
    ``backing`` (the path column of ``/proc/self/maps``, ``""`` for none) and ``private``
    (True when each child gets a copy of its own)."""
    start: int
    end: int
    perms: str
    backing: str
    private: bool

    @property
    def size(self) -> int:
        return self.end - self.start


def only_inherited(backing: str) -> bool:
    """Return True if a shared mapping backed by ``backing`` can be reached only through
    inheritance (no path a request could open names it)."""
    return (backing == "" or backing.endswith(" (deleted)") or backing.startswith("/memfd:")
            or backing.startswith("/SYSV") or backing.startswith("/dev/shm/")
            or backing == "[anon_shmem]")


def plan_shared() -> List[Region]:
    """Find every shared mapping that may be written, remember it for :func:`privatise` and
    return it. Raises ``OSError`` if ``/proc/self/smaps`` cannot be read."""
    regions, header = [], None
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            match = _HEADER.match(line)
            if match:
                header = match
                continue
            if header is None or not line.startswith("VmFlags:"):
                continue
            flags = line.split()[1:]
            if "sh" in flags and "mw" in flags:
                backing = header.group(4).strip()
                regions.append(Region(int(header.group(1), 16), int(header.group(2), 16),
                                      header.group(3), backing, only_inherited(backing)))
            header = None
    _plan[:] = regions
    return regions


def privatise() -> int:
    """Give this process its own copy, with the same contents and protection, of every planned
    ``private`` region that is still mapped, shared, at the same addresses. Returns the number
    of bytes copied. Raises ``OSError`` if a region cannot be copied or mapped (the caller
    must then not run user code)."""
    if not _plan:  # the usual case: nothing shared and writable at warm-up
        return 0
    todo = [r for r in _plan if r.private]
    if not todo:
        return 0
    live = _shared_now()
    done = 0
    for region in todo:
        if (region.start, region.end) in live:
            _make_own(region)
            done += region.size
    return done


def _shared_now() -> set:
    """Return ``{(start, end)}`` of the mappings shared now (``/proc/self/maps``: cheap)."""
    result = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            match = _HEADER.match(line)
            if match and match.group(3)[3] == "s":
                result.add((int(match.group(1), 16), int(match.group(2), 16)))
    return result


def _make_own(region: Region) -> None:
    """Copy ``region`` into a memfd of this process's own and map that, shared, over the same
    addresses: the request (and what it forks) shares it as the import intended, no sibling
    does. The copy is a ``write(2)`` from the region, so a page the kernel cannot read (past
    the end of a file) ends the copy with ``EFAULT`` instead of a ``SIGBUS``; the rest of the
    copy is zeros."""
    size = region.size
    prot = ((PROT_READ if region.perms[0] == "r" else 0)
            | (PROT_WRITE if region.perms[1] == "w" else 0)
            | (PROT_EXEC if region.perms[2] == "x" else 0))
    if not prot & PROT_READ and _libc.mprotect(region.start, size, prot | PROT_READ) != 0:
        raise _errno_error("mprotect")
    memfd = os.memfd_create("zygo-own-copy", os.MFD_CLOEXEC)
    try:
        os.ftruncate(memfd, size)
        view = memoryview((ctypes.c_char * size).from_address(region.start)).cast("B")
        copied = 0
        try:
            while copied < size:
                copied += os.write(memfd, view[copied:])
        except OSError:  # EFAULT: unreadable from here on
            pass
        finally:
            view.release()
        mapped = _libc.mmap(region.start, size, prot, MAP_SHARED | MAP_FIXED, memfd, 0)
        if mapped in (None, _MAP_FAILED):
            raise _errno_error("mmap")
    finally:
        os.close(memfd)


def _errno_error(call: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{call}: {os.strerror(err)}")
