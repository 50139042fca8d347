"""The interpreter's machine code and the zygote's anonymous memory on huge pages, in a
fork-mode zygote before ``ready``.

Why: where the hypervisor shadows the guest's page tables (this project's dev host is a
nested-virtualisation VM, a PVM guest), a freshly forked child pays for every page it touches
the first time, read or written, even a page whose entry ``fork`` copied: the hypervisor
builds its own entry for it (invisible to the guest: no page fault is counted, the time shows
as the child's user time). Measured there (docs/BENCHMARKS.md, eighth round): a child reading
4,000 pages it inherited took 6-8 us per page on 4 KiB pages and 0.45 us on 2 MiB pages; a
warm request's child touches about 750 pages of machine code, 320 of them the interpreter's.

Code: each 2 MiB-aligned range that lies wholly within the interpreter's read-only private
file mappings (the executable's, or ``libpython`` for a shared build: its code and the
read-only data around it) is copied into anonymous memory, collapsed into one transparent
huge page (``MADV_COLLAPSE``), made read+execute and moved over the original range
(``mremap`` with ``MREMAP_FIXED``): the same bytes at the same addresses, mapped by one
page-table entry. Code is never written, so its huge pages stay whole in every child. Other
libraries' code, measured side by side (docs/BENCHMARKS.md, fourteenth round), is not moved:
NumPy's ``_multiarray_umath`` and ``libcrypto`` together 1.04x the zygote side's CPU of the
interpreter's alone (``libcrypto`` is the agent's set-up's, seldom a request's, and a huge
page costs every fork and exit a page table whether the child runs it or not, where a file
mapping no child touches costs ``fork`` nothing); NumPy's alone 0.98x over 16 rounds (30
page faults fewer a request, within the rounds' spread) for 4 MiB more per zygote.

Anonymous memory: then each 2 MiB-aligned range wholly inside one private writable anonymous
mapping (the heap, the object allocator's arenas) with at least ``DENSE_PAGES`` of its 512
pages holding memory of the zygote's own (:func:`dense_pages`: ``mincore``, and the
mapping's private pages from ``smaps``, since a page read but never written maps the
kernel's shared zero page, which ``mincore`` counts) is collapsed in place
(``MADV_COLLAPSE``: the same bytes, the few holes filled with zeros); a sparse range, such as
most of a large ``np.zeros`` table even after it was read, is left alone: collapsing would
make it all real memory. ``fork`` then copies one entry for it, and a
child reads it without the hypervisor's per-page cost; a child's first write to it splits
the child's own mapping into 4 KiB entries (about what ``fork`` copied before) and copies the
one page; the zygote's own writes after a fork split its mapping of that range for good.
Measured side by side, 8 clients: the zygote side's CPU 0.95x and 0.97x (6 rounds each) and
0.91x (16 rounds; the rounds' ratios 0.92 +- 0.09), although a child takes 10-17 page faults
more (the splits).

Costs: 2 MiB of memory per code range in the zygote (its children share it), 4 MiB for the
interpreter of Debian 12's ``python3.11`` (private to each zygote, where the file's pages
were shared by every process mapping them), and for a collapsed range what its holes held
no page for (about 256 KiB at most, as planned): about 4-5 MiB more charged to a NumPy
zygote's cgroup. Ranges are taken only while what the sandbox holds (:func:`sandbox_bytes`:
every process of it, its tmpfs mounts, its memfds and System V segments) plus what they add
stays at most half of ``zygote_memory_mib`` (``--memory-mib``, :func:`choose`), and the heap's
collapses stop once the zygote's ``RssAnon`` has grown by that much: a function sized close
to its limit, or whose import started helpers that take most of it, is left as it was. Not
foreseen: memory the sandbox cannot see (a helper's own memfds) and what a helper allocates
after ``ready``; a function that runs within a few MiB of its limit needs more
``zygote_memory_mib`` or ``zygo serve --no-huge-pages``. Page cache is not counted (the
kernel reclaims it before the OOM killer acts). The read-only data in the code's ranges
becomes executable; a profiler that maps samples to files through ``/proc/PID/maps``
(``perf``, ``py-spy``) sees them as anonymous memory: ``zygo serve --no-huge-pages`` turns
both steps off (the agent's ``--no-huge-pages``).
Nothing is done in spawn mode, or when the kernel refuses a step (no transparent huge pages,
no ``MADV_COLLAPSE`` before Linux 6.1, no huge page free): a code range is replaced only once
its copy is a huge page, and a failure leaves a range as it was.
"""

import ctypes
import os
from typing import List, NamedTuple, Optional, Tuple

HUGE = 2 << 20  # x86-64 and arm64 (4 KiB base pages): a PMD maps 2 MiB
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mremap.restype = ctypes.c_void_p
_libc.mremap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class Mapping(NamedTuple):
    """One line of ``/proc/self/maps``: ``start``/``end`` (addresses), ``perms`` (``r-xp``)
    and ``path`` (``""`` for none)."""
    start: int
    end: int
    perms: str
    path: str


def read_maps(text: str) -> List[Mapping]:
    """Return the mappings of a ``/proc/PID/maps`` text, in address order."""
    out = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        out.append(Mapping(start, end, fields[1], fields[5].strip() if len(fields) > 5 else ""))
    out.sort()
    return out


def interpreter_files(exe: str, maps: List[Mapping]) -> Tuple[str, ...]:
    """The files holding the interpreter's code: ``exe`` (``/proc/self/exe``'s target) and,
    for a shared build, the mapped ``libpython``."""
    files = {exe}
    for m in maps:
        if os.path.basename(m.path).startswith("libpython"):
            files.add(m.path)
    return tuple(sorted(files))


def candidate_ranges(maps: List[Mapping], files: Tuple[str, ...]) -> List[int]:
    """Return the starts of the ``HUGE``-aligned ranges wholly covered, without a gap, by
    read-only private mappings of one of ``files``, at least one of them executable."""
    starts = []
    for path in files:
        mine = [m for m in maps if m.path == path]
        for m in mine:
            if "x" not in m.perms:
                continue
            first = (m.start // HUGE) * HUGE
            for start in range(first, m.end, HUGE):
                if start not in starts and _covered(mine, start, start + HUGE):
                    starts.append(start)
    return sorted(starts)


def _covered(mappings: List[Mapping], lo: int, hi: int) -> bool:
    at = lo
    for m in mappings:  # address order
        if m.end <= at:
            continue
        if m.start > at or m.perms[0] != "r" or m.perms[1] == "w" or m.perms[3] != "p":
            return False
        at = m.end
        if at >= hi:
            return True
    return False


def sandbox_bytes(proc: str = "/proc", mounts: Tuple[str, ...] = ("/tmp", "/dev/shm")) -> int:
    """What the sandbox holds in memory, bytes, as far as it can see: ``VmRSS`` + ``VmPTE`` of
    every process in ``proc`` (the agent is PID 1 of the sandbox's pid namespace, so helpers
    its import started count too; pages two of them share count twice), what its tmpfs
    ``mounts`` hold, this process's memfds and the sandbox's System V shared memory
    (``proc/sysvipc/shm``: its own IPC namespace), all memory charged to the sandbox's cgroup
    that no ``VmRSS`` may show. Not seen: a helper's own memfds (a non-dumpable process's
    descriptors are not this one's to list), and page cache, which the kernel reclaims
    before it kills. Raises ``OSError`` when this process's own status cannot be read."""
    total = _status_bytes(f"{proc}/self/status")
    me = os.getpid()
    for name in os.listdir(proc):
        if name.isdigit() and int(name) != me:
            try:
                total += _status_bytes(f"{proc}/{name}/status")
            except OSError:
                continue  # gone, or not ours to read
    for mount in mounts:
        try:
            st = os.statvfs(mount)
        except OSError:
            continue
        total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total + memfd_bytes(f"{proc}/self/fd") + sysv_shm_bytes(f"{proc}/sysvipc/shm")


def memfd_bytes(fd_dir: str) -> int:
    """The sizes of the memfds among the descriptors of ``fd_dir`` (``/proc/self/fd``), bytes;
    0 when it cannot be listed."""
    total = 0
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}").startswith("/memfd:"):
                total += os.stat(f"{fd_dir}/{name}").st_size
        except OSError:
            continue
    return total


def sysv_shm_bytes(path: str) -> int:
    """The sizes of the System V shared memory segments ``path`` (``/proc/sysvipc/shm``)
    lists, bytes; 0 when it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            next(f, None)  # the header: key shmid perms size ...
            return sum(int(line.split()[3]) for line in f if len(line.split()) > 3)
    except (OSError, ValueError):
        return 0


def _status_bytes(path: str, fields: Tuple[str, ...] = ("VmRSS:", "VmPTE:")) -> int:
    """The sum of ``fields`` (kB lines) of the status file ``path``, bytes. Raises
    ``OSError``."""
    total = 0
    with open(path, encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith(fields):
                total += int(line.split()[1]) * 1024
    return total


# A heap range is collapsed only when at least this many of its 512 pages hold memory of the
# zygote's own (dense_pages):
# collapsing fills the rest, and a sparse table (np.zeros of a few hundred MiB with a few
# entries set) would become real memory.
DENSE_PAGES = 448
PAGE = 4096


def heap_ranges(maps: List[Mapping]) -> List[int]:
    """Return the starts of the ``HUGE``-aligned ranges wholly inside one private writable
    anonymous mapping (the ``[heap]``, the allocator's arenas, large allocations; not
    ``[stack]``, named ``[anon:...]`` mappings, shared or file-backed ones), in address
    order."""
    starts = []
    for m in maps:
        if m.perms != "rw-p" or m.path not in ("", "[heap]"):
            continue
        start = (m.start + HUGE - 1) // HUGE * HUGE
        while start + HUGE <= m.end:
            starts.append(start)
            start += HUGE
    return starts


def private_by_mapping() -> dict:
    """``{(start, end): pages}``: the pages of each mapping of ``/proc/self/smaps`` that are
    this process's alone (``Private_Clean`` + ``Private_Dirty``): not the kernel's shared zero
    page (what a read of an untouched anonymous page maps), nor a page shared copy-on-write
    with another process (collapsing copies both into new memory). ``{}`` when it cannot be
    read (a non-dumpable process may read its own ``smaps``)."""
    out, current = {}, None
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if not head.endswith(":"):
                    lo, _, end = head.partition("-")
                    current = (int(lo, 16), int(end, 16))
                    out[current] = 0
                elif head in ("Private_Clean:", "Private_Dirty:") and current is not None:
                    out[current] += int(line.split()[1]) * 1024 // PAGE
    except (OSError, ValueError):
        return {}
    return out


def dense_pages(start: int, private: dict) -> int:
    """About how many of the 512 pages of ``[start, start + HUGE)`` hold memory of this
    process's own: the fewer of what ``mincore`` finds in memory (:func:`resident_pages`) and
    the range's share of its mapping's private pages (``private``, :func:`private_by_mapping`;
    a mapping is counted evenly over its size). ``mincore`` alone counts an untouched page
    that was read (the shared zero page) as in memory: a large ``np.zeros`` table read once
    looks full to it and empty to ``smaps``."""
    share = 0
    for (lo, end), pages in private.items():
        if lo <= start and start + HUGE <= end:
            share = pages * HUGE // (end - lo)
            break
    return min(resident_pages(start), share)


def _rss_anon() -> int:
    """This process's ``RssAnon``, bytes (what a collapse really adds shows here)."""
    return _status_bytes("/proc/self/status", ("RssAnon:",))


def resident_pages(start: int) -> int:
    """How many of the 512 pages of ``[start, start + HUGE)`` are in memory (``mincore``;
    an anonymous page never touched is not); 0 when ``mincore`` refuses."""
    vec = (ctypes.c_ubyte * (HUGE // PAGE))()
    if _libc.mincore(ctypes.c_void_p(start), HUGE, vec) != 0:
        return 0
    return sum(b & 1 for b in vec)


class Moved(NamedTuple):
    """What :func:`move_to_huge_pages` put on huge pages: the starts of the interpreter's
    code ranges replaced and of the anonymous ranges collapsed; ``added``, how much the
    zygote's ``RssAnon`` grew; ``budget``, what it was allowed to add (None: no limit);
    ``skipped``, ranges left out for the budget."""
    text: List[int]
    heap: List[int]
    added: int = 0
    budget: Optional[int] = None
    skipped: int = 0


def choose(text: List[int], heap: List[Tuple[int, int]], held: int, limit_mib: int):
    """The plan of :func:`move_to_huge_pages`, without touching memory: which of ``text`` (code
    ranges, each costing ``HUGE`` bytes: a copy) and of ``heap`` (``(start, dense pages)``,
    :func:`dense_pages`),
    each costing the pages collapsing adds) to take, in that order, so that ``held`` (bytes
    the sandbox holds, :func:`sandbox_bytes`) plus what they cost stays at most half of
    ``limit_mib`` (MiB; 0: no limit). A heap range with fewer than ``DENSE_PAGES`` is never
    taken. Returns ``(text starts, heap starts, bytes added, budget or None, ranges
    skipped for the budget)``."""
    budget = (limit_mib << 19) - held if limit_mib > 0 else None  # half the limit, bytes
    took_text, took_heap, added, skipped = [], [], 0, 0
    items = [(start, HUGE, True) for start in text]
    items += [(start, (HUGE // PAGE - pages) * PAGE, False) for start, pages in heap
              if pages >= DENSE_PAGES]
    for start, cost, is_text in items:
        if budget is not None and added + cost > budget:
            skipped += 1
            continue
        (took_text if is_text else took_heap).append(start)
        added += cost
    return took_text, took_heap, added, budget, skipped


def move_to_huge_pages(limit_mib: int = 0) -> Moved:
    """Put the interpreter's code, then the dense ranges of the zygote's anonymous memory, on
    huge pages (module doc), as :func:`choose` plans them against ``limit_mib`` (the zygote's
    ``zygote_memory_mib``; 0: no limit) and what the sandbox holds. Call it before any
    pre-forked child exists. Never raises: a range the kernel refuses is left as it was."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = read_maps(f.read())
        text = candidate_ranges(maps, interpreter_files(os.readlink("/proc/self/exe"), maps))
        held = sandbox_bytes() if limit_mib > 0 else 0
    except OSError:
        return Moved([], [])
    private = private_by_mapping()
    heap = [(start, dense_pages(start, private)) for start in heap_ranges(maps)]
    text, heap_starts, _, budget, skipped = choose(text, heap, held, limit_mib)
    moved = Moved([], [], 0, budget, skipped)
    try:
        before = _rss_anon()
    except OSError:
        return moved
    added = 0
    for start in text:  # the maps read before: moving code changes no heap
        if _replace(start):
            moved.text.append(start)
    for start in heap_starts:
        try:  # what the plan could not see (a page shared with a helper) shows here: stop
            added = _rss_anon() - before
        except OSError:
            break
        if budget is not None and added + HUGE > budget:
            moved = moved._replace(skipped=moved.skipped + len(heap_starts) - len(moved.heap))
            break
        if _libc.madvise(start, HUGE, _MADV_COLLAPSE) == 0:
            moved.heap.append(start)
    try:
        added = _rss_anon() - before
    except OSError:
        pass
    return moved._replace(added=max(added, 0))


def _replace(start: int) -> bool:
    """Copy ``[start, start + HUGE)`` into a huge page and move it over the original."""
    raw = _libc.mmap(None, 2 * HUGE, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS,
                     -1, 0)
    if raw in (None, _MAP_FAILED):
        return False
    copy = (raw + HUGE - 1) // HUGE * HUGE  # aligned: the rest of the reservation goes back
    if copy > raw:
        _libc.munmap(raw, copy - raw)
    if raw + 2 * HUGE > copy + HUGE:
        _libc.munmap(copy + HUGE, raw + 2 * HUGE - copy - HUGE)
    moved = False
    try:
        if _libc.madvise(copy, HUGE, _MADV_HUGEPAGE) != 0:
            return False
        ctypes.memmove(copy, start, HUGE)
        if _libc.madvise(copy, HUGE, _MADV_COLLAPSE) != 0:
            return False  # no huge page: 512 small ones would only cost memory
        if _libc.mprotect(copy, HUGE, _PROT_READ | _PROT_EXEC) != 0:
            return False
        moved = _libc.mremap(copy, HUGE, HUGE, _MREMAP_MAYMOVE | _MREMAP_FIXED, start) == start
        return moved
    finally:
        if not moved:
            _libc.munmap(copy, HUGE)
