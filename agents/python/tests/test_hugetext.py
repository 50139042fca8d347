"""zygo_agent.hugetext: the interpreter's code and the heap on huge pages in a fork-mode zygote."""

import ctypes
import hashlib
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from zygo_agent import hugetext  # noqa: E402
from inchild import in_child  # noqa: E402


def _in_child(work) -> str:
    """``work()`` in a forked child (inchild.in_child); fails when it raised."""
    return in_child(work, check=True)


H = hugetext.HUGE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
EXE = "/usr/bin/python3.11"


def _maps(*lines):
    return hugetext.read_maps("\n".join(lines))


class CandidateRangesTest(unittest.TestCase):
    def test_ranges_wholly_inside_the_interpreter_read_only_mappings(self):
        maps = _maps(
            "00400000-0041f000 r--p 00000000 fe:00 1 /usr/bin/python3.11",
            "0041f000-006d2000 r-xp 0001f000 fe:00 1 /usr/bin/python3.11",
            "006d2000-00945000 r--p 002d2000 fe:00 1 /usr/bin/python3.11",
            "00945000-00946000 r--p 00544000 fe:00 1 /usr/bin/python3.11",
            "00946000-00a85000 rw-p 00545000 fe:00 1 /usr/bin/python3.11",
        )
        files = hugetext.interpreter_files(EXE, maps)
        self.assertEqual(files, (EXE,))
        # 0x800000-0xa00000 runs into the writable data: not a candidate.
        self.assertEqual(hugetext.candidate_ranges(maps, files), [0x400000, 0x600000])

    def test_gaps_writable_shared_and_other_files_are_refused(self):
        maps = _maps(
            "00400000-00500000 r-xp 00000000 fe:00 1 /usr/bin/python3.11",
            "00500000-00600000 r--p 00100000 fe:00 2 /usr/lib/other.so",  # another file
            "00600000-00700000 r-xp 00000000 fe:00 1 /usr/bin/python3.11",
            "00700000-00800000 r--s 00100000 fe:00 1 /usr/bin/python3.11",  # shared
            "00800000-00900000 r-xp 00000000 fe:00 1 /usr/bin/python3.11",  # then a gap
        )
        self.assertEqual(hugetext.candidate_ranges(maps, (EXE,)), [])

    def test_libpython_of_a_shared_build_counts(self):
        maps = _maps(
            "00400000-00401000 r-xp 00000000 fe:00 1 /usr/bin/python3.11",
            "7f0000000000-7f0000200000 r--p 00000000 fe:00 3 /usr/lib/libpython3.11.so.1.0",
            "7f0000200000-7f0000600000 r-xp 00200000 fe:00 3 /usr/lib/libpython3.11.so.1.0",
        )
        files = hugetext.interpreter_files(EXE, maps)
        self.assertIn("/usr/lib/libpython3.11.so.1.0", files)
        # The first range holds no code (read-only data only): not a candidate.
        self.assertEqual(hugetext.candidate_ranges(maps, files), [0x7f0000200000, 0x7f0000400000])


class MoveTest(unittest.TestCase):
    """Each in a child (_in_child): the test process keeps its mappings."""

    def test_same_bytes_same_addresses_and_the_interpreter_runs_on(self):
        """Every range that could be chosen keeps its bytes, and each range moved is
        anonymous memory on a huge page; code still runs (a JSON round trip, an exception)
        and a forked grandchild sees the same."""
        def work():
            maps = _own_maps()
            # Every range that could be chosen (hashing them makes libcrypto's hot).
            starts = hugetext.candidate_ranges(
                maps, tuple({m.path for m in maps if m.path.startswith("/")}))
            before = {s: hashlib.sha256(ctypes.string_at(s, H)).hexdigest() for s in starts}
            moved = hugetext.move_to_huge_pages().text  # no limit
            after = {s: hashlib.sha256(ctypes.string_at(s, H)).hexdigest() for s in starts}
            import json
            ok = json.loads(json.dumps({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]}
            try:
                raise KeyError("x")
            except KeyError:
                pass
            gpid = os.fork()
            if gpid == 0:
                os._exit(0 if sum(range(10)) == 45 else 1)
            _, status = os.waitpid(gpid, 0)
            with open("/proc/self/smaps") as f:
                huge = _anon_huge_kib(f.read(), moved)
            return (f"{len(starts)} {len(moved)} {before == after and set(moved) <= set(starts)} "
                    f"{ok} {os.waitstatus_to_exitcode(status)} {huge}")

        candidates, moved, same, ok, grandchild, huge_kib = _in_child(work).split()
        self.assertEqual((same, ok, grandchild), ("True", "True", "0"))
        self.assertLessEqual(int(moved), int(candidates))
        if os.path.exists("/sys/kernel/mm/transparent_hugepage") and int(candidates):
            self.assertGreater(int(moved), 0, "the kernel has huge pages: a range is moved")
        self.assertEqual(int(huge_kib), int(moved) * (H >> 10),
                         "each moved range is one anonymous huge page")

    def test_the_heap_is_collapsed_in_place(self):
        """A dense 8 MiB allocation (its own anonymous mapping) keeps its bytes, and the
        ranges collapsed inside it are huge pages."""
        def work():
            block = bytearray(os.urandom(8 << 20))
            before = hashlib.sha256(block).hexdigest()
            at = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
            moved = hugetext.move_to_huge_pages().heap
            inside = [s for s in moved if at <= s and s + H <= at + len(block)]
            # The block's mapping may have merged with a neighbour whose ranges were
            # collapsed too: count every range moved within the mapping.
            lo, hi = _vma_bounds(at)
            in_vma = [s for s in moved if lo <= s < hi]
            with open("/proc/self/smaps") as f:
                huge = _anon_huge_kib(f.read(), {lo})
            return (f"{len(inside)} {len(in_vma)} {huge} "
                    f"{hashlib.sha256(block).hexdigest() == before}")

        inside, in_vma, huge_kib, same = _in_child(work).split()
        self.assertEqual(same, "True")
        self.assertGreaterEqual(int(inside), 3, "8 MiB hold three aligned 2 MiB ranges at least")
        self.assertEqual(int(huge_kib), int(in_vma) * (H >> 10))

    def test_a_sparse_mapping_is_left_alone(self):
        """An 8 MiB mapping with one byte written every 2 MiB (a large np.zeros with a few
        entries set) is not collapsed: that would make all of it memory."""
        inside, taken, private = (int(x) for x in _in_child(lambda: _sparse(read=False)).split())
        self.assertGreaterEqual(inside, 3)
        if private >= inside * (H // hugetext.PAGE):
            self.skipTest(f"each write faulted in a whole huge page ({private} private pages: "
                          "transparent_hugepage/enabled is always): nothing sparse")
        self.assertLessEqual(private, 64, "four pages written (a kernel may fault in a few more)")
        self.assertEqual(taken, 0)

    def test_memory_shared_with_another_process_is_left_alone(self):
        """A dense 8 MiB mapping written before a fork is, in the child, wholly in memory to
        mincore but none of it the child's own (every page is shared copy-on-write with the
        parent; smaps counts it Shared_*): collapsing would copy all of it. Not collapsed,
        whatever the kernel does with reads or its huge-page setting."""
        size = 8 << 20
        addr = ctypes.c_void_p(_libc.mmap(None, size, 3, 0x22, -1, 0)).value
        self.addCleanup(_libc.munmap, addr, size)
        ctypes.memset(addr, 7, size)

        def work():
            inside = [s for s in hugetext.heap_ranges(_own_maps())
                      if addr <= s and s + H <= addr + size]
            resident = min(hugetext.resident_pages(s) for s in inside)
            taken = [s for s in hugetext.move_to_huge_pages().heap if s in inside]
            return f"{len(inside)} {resident} {len(taken)}"

        inside, resident, taken = (int(x) for x in _in_child(work).split())
        self.assertGreaterEqual(inside, 3)
        self.assertEqual(resident, H // hugetext.PAGE, "mincore sees every shared page")
        self.assertEqual(taken, 0)

    def test_a_sparse_mapping_read_whole_is_left_alone(self):
        """The same mapping read whole (np.count_nonzero of the table): where the kernel maps
        its shared zero page for a read of an untouched page, mincore reports every page in
        memory and only the mapping's private pages tell it is sparse: still not collapsed.
        A kernel that gives each page read a page of its own (this test's host kind has one)
        makes the table memory by itself: nothing sparse is left to protect."""
        inside, taken, private = (int(x) for x in _in_child(lambda: _sparse(read=True)).split())
        if private >= inside * (H // hugetext.PAGE):
            self.skipTest(f"this kernel gave every page read a page of its own ({private} "
                          "private pages): the table is memory, with or without huge pages")
        self.assertEqual(taken, 0)


def _sparse(read: bool) -> str:
    """In a child (:func:`_in_child`): map 8 MiB, write one byte every 2 MiB, read every page
    when ``read``, then move to huge pages. Returns "ranges-inside taken private-pages": the
    2 MiB ranges wholly inside the mapping, those collapsed, and the mapping's private pages
    (smaps) before the move."""
    size = 8 << 20
    addr = ctypes.c_void_p(_libc.mmap(None, size, 3, 0x22, -1, 0)).value
    for at in range(addr, addr + size, H):
        ctypes.memset(at, 1, 1)
    if read:
        total = sum(ctypes.c_ubyte.from_address(at).value
                    for at in range(addr, addr + size, hugetext.PAGE))
        assert total == size // H
        assert hugetext.resident_pages(addr + (-addr) % H) == H // hugetext.PAGE, \
            "read whole: mincore sees every page"
    private = sum(pages for (lo, end), pages in hugetext.private_by_mapping().items()
                  if lo <= addr < end)
    inside = [s for s in hugetext.heap_ranges(_own_maps()) if addr <= s and s + H <= addr + size]
    taken = [s for s in hugetext.move_to_huge_pages().heap if s in inside]
    return f"{len(inside)} {len(taken)} {private}"


class ChooseTest(unittest.TestCase):
    """choose: what move_to_huge_pages takes, against half of the limit."""
    DENSE = hugetext.HUGE // hugetext.PAGE  # 512: a range wholly in memory adds nothing

    def test_code_then_dense_heap_within_half_the_limit(self):
        heap = [(10 * H, self.DENSE), (11 * H, 448), (12 * H, 100)]  # the last is sparse
        text, taken, added, budget, skipped = hugetext.choose([0, H], heap, 0, 64)
        self.assertEqual((text, taken, skipped), ([0, H], [10 * H, 11 * H], 0))
        self.assertEqual(added, 2 * H + (self.DENSE - 448) * hugetext.PAGE)
        self.assertEqual(budget, 32 << 20)

    def test_what_the_sandbox_holds_counts(self):
        # 28 MiB held of a 64 MiB limit: 4 MiB of room under half, the code's 4 MiB fit,
        # a heap range adding 256 KiB does not.
        text, taken, added, budget, skipped = hugetext.choose(
            [0, H], [(10 * H, 448)], 28 << 20, 64)
        self.assertEqual((text, taken, skipped), ([0, H], [], 1))
        # Held past half: nothing, not even a dense range that would add nothing.
        text, taken, _, budget, skipped = hugetext.choose([0], [(10 * H, self.DENSE)], 33 << 20, 64)
        self.assertEqual((text, taken, skipped), ([], [], 2))
        self.assertLess(budget, 0)

    def test_no_limit_takes_every_dense_range(self):
        text, taken, _, budget, skipped = hugetext.choose(
            [0], [(10 * H, 500), (11 * H, 447)], 1 << 40, 0)
        self.assertEqual((text, taken, budget, skipped), ([0], [10 * H], None, 0))


class HeapRangesTest(unittest.TestCase):
    def test_private_writable_anonymous_only(self):
        maps = _maps(
            "7f0000100000-7f0000900000 rw-p 00000000 00:00 0",  # unaligned start and end
            "7f0001000000-7f0001400000 rw-p 00000000 00:00 0 [heap]",
            "7f0002000000-7f0002400000 rw-p 00000000 00:00 0 [stack]",
            "7f0003000000-7f0003400000 rw-s 00000000 00:01 9 /dev/zero (deleted)",
            "7f0004000000-7f0004400000 rw-p 00000000 00:00 0 [anon:arena]",
            "7f0005000000-7f0005400000 rw-p 00000000 00:01 7 /memfd:x (deleted)",
            "7f0006000000-7f0006400000 rw-p 00001000 fe:00 3 /usr/lib/libfoo.so",
            "7f0007000000-7f0007400000 ---p 00000000 00:00 0",
            "7f0008000000-7f00081fffff rw-p 00000000 00:00 0",  # one page short of a range
        )
        self.assertEqual(hugetext.heap_ranges(maps),
                         [0x7f0000200000, 0x7f0000400000, 0x7f0000600000,
                          0x7f0001000000, 0x7f0001200000])

    def test_resident_pages_counts_pages_in_memory(self):
        size = 4 * H
        addr = ctypes.c_void_p(_libc.mmap(None, size, 3, 0x22, -1, 0)).value
        self.addCleanup(_libc.munmap, ctypes.c_void_p(addr), size)
        start = (addr + H - 1) // H * H
        self.assertEqual(hugetext.resident_pages(start), 0)
        for i in range(10):
            ctypes.memset(start + i * hugetext.PAGE, 1, 1)
        self.assertEqual(hugetext.resident_pages(start), 10)

    def test_memfds_and_system_v_segments_count(self):
        fd = os.memfd_create("zygo-test")
        self.addCleanup(os.close, fd)
        before = hugetext.memfd_bytes("/proc/self/fd")
        os.ftruncate(fd, 3 << 20)
        self.assertEqual(hugetext.memfd_bytes("/proc/self/fd") - before, 3 << 20)
        with tempfile.NamedTemporaryFile("w", suffix="shm") as f:
            f.write("       key      shmid perms                  size  cpid  lpid\n"
                    "         0          1   600               1048576    10    10\n"
                    "         0          2   600                  4096    10    10\n")
            f.flush()
            self.assertEqual(hugetext.sysv_shm_bytes(f.name), 1048576 + 4096)
        self.assertEqual(hugetext.sysv_shm_bytes("/nonexistent"), 0)

    def test_sandbox_bytes_adds_every_process_and_the_tmpfs(self):
        with tempfile.TemporaryDirectory() as proc:
            for name, rss, pte in (("self", 1000, 10), ("1", 2000, 20), ("22", 30, 0)):
                os.makedirs(os.path.join(proc, name))
                with open(os.path.join(proc, name, "status"), "w") as f:
                    f.write(f"Name:\tx\nVmRSS:\t{rss} kB\nVmPTE:\t{pte} kB\n")
            os.makedirs(os.path.join(proc, "notapid"))
            self.assertEqual(hugetext.sandbox_bytes(proc, mounts=()), (1000 + 10 + 2000 + 20 + 30) * 1024)
            st = os.statvfs(proc)
            self.assertEqual(hugetext.sandbox_bytes(proc, mounts=(proc,)),
                             (3060 << 10) + (st.f_blocks - st.f_bfree) * st.f_frsize)


def _own_maps():
    with open("/proc/self/maps") as f:
        return hugetext.read_maps(f.read())


def _vma_bounds(address):
    """``(start, end)`` of the mapping holding ``address``, ``(-1, -1)`` when none does."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return lo, hi
    return -1, -1


def _anon_huge_kib(smaps: str, starts) -> int:
    total, current = 0, None
    for line in smaps.splitlines():
        head = line.split(None, 1)[0]
        if "-" in head and not head.endswith(":"):
            current = int(head.split("-")[0], 16)
        elif head == "AnonHugePages:" and current in starts:
            total += int(line.split()[1])
    return total


if __name__ == "__main__":
    unittest.main()
