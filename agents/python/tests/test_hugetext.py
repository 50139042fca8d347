"""zygo_agent.hugetext: the interpreter's code and the heap on huge pages in a fork-mode zygote."""

import ctypes
import hashlib
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zygo_agent import hugetext  # noqa: E402

H = hugetext.HUGE
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
    def test_same_bytes_same_addresses_and_the_interpreter_runs_on(self):
        """In a child (the test process keeps its mappings): every range that could be chosen
        keeps its bytes, and each range moved is anonymous memory on a huge page; code still runs
        (a JSON round trip, a class, an exception) and a forked grandchild sees the same."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                with open("/proc/self/maps") as f:
                    maps = hugetext.read_maps(f.read())
                # Every range that could be chosen (hashing them makes libcrypto's hot).
                starts = hugetext.candidate_ranges(
                    maps, tuple({m.path for m in maps if m.path.startswith("/")}))
                before = {s: hashlib.sha256(ctypes.string_at(s, H)).hexdigest() for s in starts}
                os.environ.pop("ZYGO_HUGE_PAGES", None)  # on by default, no limit here
                moved = hugetext.move_to_huge_pages().text
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
                report = (f"{len(starts)} {len(moved)} {before == after and set(moved) <= set(starts)} {ok} "
                          f"{os.waitstatus_to_exitcode(status)} {huge}")
                os.write(w, report.encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        out = os.read(r, 1000).decode().split()
        os.close(r)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        candidates, moved, same, ok, grandchild, huge_kib = out
        self.assertEqual((same, ok, grandchild), ("True", "True", "0"))
        self.assertLessEqual(int(moved), int(candidates))
        self.assertEqual(int(huge_kib), int(moved) * (H >> 10),
                         "each moved range is one anonymous huge page")

    def test_the_heap_is_collapsed_in_place(self):
        """In a child: a dense 8 MiB allocation (its own anonymous mapping) keeps its bytes,
        and the ranges collapsed inside it are huge pages."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                block = bytearray(os.urandom(8 << 20))
                before = hashlib.sha256(block).hexdigest()
                at = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
                os.environ.pop("ZYGO_HUGE_PAGES", None)
                heap = [s for s in hugetext.move_to_huge_pages().heap
                        if at <= s and s + H <= at + len(block)]
                with open("/proc/self/smaps") as f:
                    huge = _anon_huge_kib(f.read(), {_vma_start(at)})
                same = hashlib.sha256(block).hexdigest() == before
                os.write(w, f"{len(heap)} {huge} {same}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        ranges, huge_kib, same = os.read(r, 1000).decode().split()
        os.close(r)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(same, "True")
        self.assertGreaterEqual(int(ranges), 3, "8 MiB hold three aligned 2 MiB ranges at least")
        self.assertEqual(int(huge_kib), int(ranges) * (H >> 10))

    def test_off_when_the_environment_says_0(self):
        os.environ["ZYGO_HUGE_PAGES"] = "0"
        try:
            self.assertEqual(hugetext.move_to_huge_pages(), ([], []))
        finally:
            os.environ.pop("ZYGO_HUGE_PAGES", None)

    def test_nothing_moved_past_half_the_memory_limit(self):
        """A limit whose half the process's resident memory already exceeds takes nothing
        (a function sized close to zygote_memory_mib deploys as before)."""
        resident_mib = hugetext.resident_bytes() >> 20
        self.assertGreater(resident_mib, 4)
        os.environ.pop("ZYGO_HUGE_PAGES", None)
        self.assertEqual(hugetext.move_to_huge_pages(limit_mib=resident_mib), ([], []))
        self.assertEqual(hugetext.move_to_huge_pages(limit_mib=2 * resident_mib + 1), ([], []),
                         "2 MiB more would pass half the limit")


def _vma_start(address):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return lo
    return -1


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
