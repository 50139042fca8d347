"""Memory a child would share with the zygote and its siblings: ``MAP_SHARED`` regions.

``fork()`` copies private memory (copy-on-write) but a ``MAP_SHARED`` mapping stays the same
pages in every process: a region made at import with ``mmap.mmap(-1, n)`` (anonymous shared),
``multiprocessing.Value``/``Array`` (a deleted file in ``/dev/shm``), ``shared_memory``
(``/dev/shm/psm_*``), a memfd or a System V segment is writable by every request at once, a
channel from one request to the next.

:func:`plan_shared` (warm-up) finds, in ``/proc/self/smaps``, every mapping that is shared and
may be written (``VmFlags`` ``sh`` and ``mw``: a read-only mapping of a file opened read-only can
never become writable). Those that only inheritance reaches (anonymous, deleted, memfd,
System V, POSIX shared memory under ``/dev/shm``) are made private in each fork-mode child
before user code by :func:`privatise`: the contents are copied into a private anonymous
mapping (read through ``/proc/self/mem``, so a page past the end of a file reads as zeros
instead of raising ``SIGBUS``) which ``mremap`` then moves onto the same addresses, with the
same protection. Python ``mmap`` objects, ctypes pointers and NumPy arrays over the region keep
working, on memory of their own. A shared mapping of a file with a path is kept (every request
can open that file anyway) and named at warm-up.
"""

import ctypes
import os
import re
from typing import List, NamedTuple

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.mremap.restype = ctypes.c_void_p
_libc.mremap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p)
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")

_plan: List["Region"] = []


class Region(NamedTuple):
    """One shared, writable mapping: ``start``/``end`` (addresses), ``perms`` (``rw-s``),
    ``backing`` (the path column of ``/proc/self/maps``, ``""`` for none) and ``private``
    (True when each child gets a private copy)."""
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
    """Make every planned ``private`` region that is still mapped, shared, at the same
    addresses a private copy with the same contents and protection. Returns the number of
    bytes made private. Raises ``OSError`` if a region cannot be copied or moved (the caller
    must then not run user code)."""
    todo = [r for r in _plan if r.private]
    if not todo:
        return 0
    live = _shared_now()
    done = 0
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for region in todo:
            if (region.start, region.end) in live:
                _make_private(mem.fileno(), region)
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


def _make_private(mem_fd: int, region: Region) -> None:
    size = region.size
    copy = _libc.mmap(None, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if copy in (None, _MAP_FAILED):
        raise _errno_error("mmap")
    try:
        buffer = (ctypes.c_char * size).from_address(copy)
        view = memoryview(buffer).cast("B")
        got = 0
        while got < size:  # a short read: the rest is past the end of the file (zeros)
            try:
                n = os.preadv(mem_fd, [view[got:]], region.start + got)
            except OSError:
                break
            if n <= 0:
                break
            got += n
        del view, buffer
        moved = _libc.mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, region.start)
        if moved in (None, _MAP_FAILED):
            raise _errno_error("mremap")
    except BaseException:
        _libc.munmap(copy, size)
        raise
    prot = ((PROT_READ if region.perms[0] == "r" else 0)
            | (PROT_WRITE if region.perms[1] == "w" else 0)
            | (PROT_EXEC if region.perms[2] == "x" else 0))
    if _libc.mprotect(region.start, size, prot) != 0:
        raise _errno_error("mprotect")


def _errno_error(call: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{call}: {os.strerror(err)}")
