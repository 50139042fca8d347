"""In-process tests of agent pieces that need no supervisor: the reseed hook list (also the
entry point after a sandbox restore), the intent recorder, the libcrypto verdict, the wire
codec, result encoding and the request's own Landlock domain."""

import errno
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError as exc:  # fail loudly, never skip
    raise ImportError("python3-numpy is needed by these tests: apt-get install python3-numpy") \
        from exc

from zygo_agent import child, errors, libc, loader, recorder, reseed, warmup, wire  # noqa: E402
from inchild import in_child as _in_child  # noqa: E402


class ReseedTest(unittest.TestCase):
    """reseed_all() without any fork: what a restored sandbox runs (case BH-02)."""

    def test_reseed_all_changes_every_state(self):
        recorder.install()
        unseeded, seeded = random.Random(), random.Random(5)
        recorder.stop()
        gen = np.random.default_rng()
        reseed.register_numpy_generator(gen)
        before = (random.getstate(), np.random.get_state()[1].tobytes(), unseeded.getstate(),
                  seeded.getstate(), gen.bit_generator.state)
        tempfile.gettempdir()
        uuid.uuid1()
        ran = reseed.reseed_all()
        self.assertEqual(ran, ["random", "numpy_global", "torch", "openssl", "uuid1",
                               "tempfile", "generators", "native_known"])
        self.assertNotEqual(random.getstate(), before[0])
        self.assertNotEqual(np.random.get_state()[1].tobytes(), before[1])
        self.assertNotEqual(unseeded.getstate(), before[2])
        self.assertEqual(seeded.getstate(), before[3])  # explicit seed: left alone
        self.assertNotEqual(gen.bit_generator.state, before[4])
        self.assertIsNone(uuid._generate_time_safe)
        self.assertIsNone(uuid._last_timestamp)
        self.assertIsNone(tempfile._name_sequence)
        self.assertIsNone(tempfile.tempdir)

    def test_restored_copies_diverge(self):
        """Two processes with the same NumPy state (as two restored clones would have)
        draw different numbers once each ran reseed_all()."""
        script = ("import sys; sys.path.insert(0, sys.argv[1]); import numpy as np; "
                  "np.random.seed(1); from zygo_agent import reseed; reseed.reseed_all(); "
                  "print(np.random.randint(0, 2**62))")
        agent_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        outs = {subprocess.run(["/usr/bin/python3", "-I", "-c", script, agent_dir],
                               capture_output=True, text=True, check=True).stdout
                for _ in range(3)}
        self.assertEqual(len(outs), 3)


class RecorderTest(unittest.TestCase):
    def test_explicitness(self):
        recorder.install()
        try:
            a, b, c = random.Random(), random.Random(1), random.Random()
            c.setstate(b.getstate())
            d = random.Random(2)
            d.seed()
        finally:
            recorder.stop()
        late = random.Random()
        self.assertEqual([recorder.explicit_seed(r) for r in (a, b, c, d, late)],
                         [False, True, True, False, None])
        self.assertIn(a, recorder.unseeded_instances())
        self.assertNotIn(b, recorder.unseeded_instances())


class LibcryptoTest(unittest.TestCase):
    def test_verdicts(self):
        cases = [
            ("OpenSSL 1.0.2u  20 Dec 2019", (1, 0, 2, 21, 15), "warn"),
            ("OpenSSL 1.1.1c  28 May 2019", (1, 1, 1, 3, 15), "warn"),
            ("OpenSSL 1.1.1d  10 Sep 2019", (1, 1, 1, 4, 15), "info"),
            ("OpenSSL 3.0.0-alpha5 30 Jul 2020", (3, 0, 0, 0, 0), "warn"),
            ("OpenSSL 3.0.0 7 sep 2021", (3, 0, 0, 0, 15), "info"),
            ("OpenSSL 3.0.19 27 Jan 2026", (3, 0, 0, 19, 0), "info"),
            ("LibreSSL 3.8.2", (3, 8, 2, 0, 15), "info"),
            ("OpenSSL 1.1.1d-dev  xx XXX xxxx", (1, 1, 1, 4, 0), "info"),
            ("OpenSSL 3.0.20-dev", (3, 0, 0, 20, 0), "warn"),
        ]
        for version, info, level in cases:
            with self.subTest(version=version):
                self.assertEqual(warmup.libcrypto_verdict(version, info)[0], level)
                # A forked child skips ssl.RAND_add exactly for the OpenSSL that reseeds
                # itself after a fork: never a warned one, never LibreSSL, never a 1.x
                # development build.
                self.assertEqual(reseed.openssl_reseeds_after_fork(version, info),
                                 level == "info" and version.startswith("OpenSSL ")
                                 and "1.1.1d-dev" not in version)


class ForkedReseedTest(unittest.TestCase):
    """reseed_all(forked=True) leaves ssl.RAND_add out exactly when OpenSSL reseeds itself
    after a fork (OPENSSL_RESEEDS_AFTER_FORK); otherwise, and when not forked, it runs."""

    def test_openssl_hook_by_verdict(self):
        calls = []
        real = reseed.reseedcore.ssl.RAND_add
        reseed.reseedcore.ssl.RAND_add = lambda data, entropy: calls.append(len(data))
        self.addCleanup(setattr, reseed.reseedcore.ssl, "RAND_add", real)
        saved = reseed.OPENSSL_RESEEDS_AFTER_FORK
        self.addCleanup(setattr, reseed, "OPENSSL_RESEEDS_AFTER_FORK", saved)
        for reseeds_itself, forked, expect in ((True, True, 0), (True, False, 1),
                                               (False, True, 1), (False, False, 1)):
            with self.subTest(reseeds_itself=reseeds_itself, forked=forked):
                reseed.OPENSSL_RESEEDS_AFTER_FORK = reseeds_itself
                del calls[:]
                ran = reseed.reseed_all(forked=forked)
                self.assertEqual(len(calls), expect)
                self.assertEqual("openssl" in ran, expect == 1)


class WireTest(unittest.TestCase):
    def setUp(self):
        self.a, self.b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)

    def test_round_trip_with_descriptor(self):
        r, w = os.pipe()
        wire.send(self.a, {"type": "fork", "seq": 1}, [w])
        os.close(w)
        msg = wire.recv(self.b)
        self.assertEqual((msg.type, msg.body["seq"], len(msg.fds)), ("fork", 1, 1))
        os.write(msg.fds[0], b"x")
        self.assertEqual(os.read(r, 1), b"x")
        wire.close_all(msg.fds + (r,))

    def test_invalid_datagrams(self):
        for data in (b"{", b"[1]", b'{"type": 3}', b"\xff"):
            self.a.send(data)
            with self.assertRaises(wire.ProtocolError):
                wire.recv(self.b)
        self.a.close()
        self.assertIsNone(wire.recv(self.b))

    def test_oversized_message_refused(self):
        with self.assertRaises(ValueError):
            wire.send(self.a, {"type": "x", "pad": "a" * wire.MAX_DATAGRAM})


def _errno_of(fn) -> str:
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


class OpenSSLAheadTest(unittest.TestCase):
    """__main__._init_openssl_random(): OpenSSL's DRBGs built once in the zygote, so that a
    child reseeds them instead of building them; children still draw different bytes."""

    def test_children_draw_apart_after_the_zygote_built_the_drbgs(self):
        import ssl
        from zygo_agent import __main__ as agent_main
        agent_main._init_openssl_random()
        parent = ssl.RAND_bytes(16).hex()
        # One child that only draws (OpenSSL's own fork detection), two that reseed first
        # (rule 7, as a request does): every draw differs from the others and the zygote's.
        draws = [_in_child(lambda: ssl.RAND_bytes(16).hex())]
        draws += [_in_child(lambda: (reseed.reseed_all(), ssl.RAND_bytes(16).hex())[1])
                  for _ in range(2)]
        for d in draws:
            self.assertRegex(d, r"^[0-9a-f]{32}$")
        self.assertEqual(len(set(draws + [parent])), 4, f"repeated OpenSSL bytes: {draws} {parent}")


class LandlockTest(unittest.TestCase):
    """child.enter_own_domain(): a forked request's own Landlock domain."""

    def test_enter_own_domain(self):
        parent = os.getpid()

        def probe():
            entered = child.enter_own_domain(())
            sub = subprocess.Popen(["sleep", "30"])  # in the domain: still ours to signal
            own = _errno_of(lambda: os.kill(sub.pid, signal.SIGTERM))
            sub.wait()
            return " ".join([str(entered), own,
                             _errno_of(lambda: os.kill(parent, signal.SIGCONT)),
                             _errno_of(lambda: os.close(os.open(f"/proc/{parent}/mem",
                                                                os.O_RDWR)))])

        out = _in_child(probe)
        if libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
            # Root here: CAP_KILL and CAP_SYS_PTRACE do not get past the domain.
            self.assertEqual(out, "True ok EPERM EACCES")
        else:
            self.assertEqual(out, "False ok ok ok", "no scoping: the request must carry on")

    def test_refuses_with_other_threads(self):
        """A thread alive before the domain (from an at-fork hook, say) would escape it."""
        def probe():
            stop = threading.Event()
            threading.Thread(target=stop.wait, daemon=True).start()
            try:
                return child.enter_own_domain(())
            finally:
                stop.set()

        out = _in_child(probe)
        if libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
            self.assertIn("RuntimeError", out)
        else:
            self.assertEqual(out, "False", "no scoping: the request must carry on")

    def _landlock_dirs(self, prefix, under=None):
        """Makes (base, other, reqdir, sub) for a Landlock probe: base a new directory under
        ``under`` (default: the temp dir) holding reqdir (base/req-1), other one under
        /var/tmp (outside every writable dir), sub a running `sleep` of the same uid; all
        removed at cleanup."""
        base = tempfile.mkdtemp(prefix=prefix, dir=under)
        other = tempfile.mkdtemp(prefix="zygo-ll-other-", dir="/var/tmp")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", base, other]))
        reqdir = os.path.join(base, "req-1")
        os.mkdir(reqdir)
        sub = subprocess.Popen(["sleep", "30"])
        self.addCleanup(sub.wait)
        self.addCleanup(sub.kill)
        return base, other, reqdir, sub

    def test_writes_only_beneath_writable_dirs(self):
        """Writes under /proc (here: an exec'd subprocess's oom_score_adj, of the same uid,
        dumpable) are refused; writes beneath the writable dirs (a new file in /tmp too), to
        /dev/null and through pipes and descriptors already open, still work; a file beside
        the request's directory in the request root is not writable. The request root is
        outside /tmp, as /run/zygo/req is in a sandbox (one beneath /tmp splits /tmp's rule
        into its entries: test_plan_leaves_out_only_the_request_root)."""
        base, other, reqdir, sub = self._landlock_dirs("zygo-ll-", under="/var/tmp")
        in_tmp = os.path.join("/tmp", "zygo-ll-tmp-%d" % os.getpid())
        self.addCleanup(lambda: os.path.exists(in_tmp) and os.unlink(in_tmp))
        if os.path.exists(in_tmp):
            os.unlink(in_tmp)
        kept = os.open(os.path.join(other, "kept"), os.O_WRONLY | os.O_CREAT, 0o600)
        self.addCleanup(os.close, kept)

        def write(path):
            return _errno_of(lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)))

        def probe(ahead):
            child.REQUEST_ROOT = base
            if ahead:  # the pre-forked child's rehearsal made the ruleset before GO
                child._rehearse()
            made_ahead = child._domain_ahead[0] != -1
            entered = child.enter_own_domain(child.writable_dirs(reqdir))
            r, w = os.pipe()
            return " ".join([str(entered), str(made_ahead),
                             write(f"/proc/{sub.pid}/oom_score_adj"),
                             write(f"/proc/{sub.pid}/clear_refs"), write("/proc/self/oom_score_adj"),
                             write(os.path.join(other, "kept")),
                             write(os.path.join(reqdir, "result.json")),
                             write(os.path.join(base, "req-2")), write("/dev/null"),
                             write(in_tmp),
                             _errno_of(lambda: os.write(kept, b"x")),
                             _errno_of(lambda: os.close(os.open(f"/proc/self/fd/{w}", os.O_WRONLY))),
                             str(child._domain_ahead[0])])

        for ahead in (False, True):
            with self.subTest(ahead=ahead):
                out = _in_child(lambda: probe(ahead))
                if libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
                    self.assertEqual(out, f"True {ahead} EACCES EACCES EACCES EACCES ok EACCES "
                                          "ok ok ok ok -1")
                else:
                    self.assertEqual(out.split()[0], "False", "no scoping: the request must carry on")

    def test_other_requests_unreachable(self):
        """Every request directory of a zygote is beside the others in the request root and
        belongs to the same uid, and its name leaks (a socket bound in TMPDIR is listed in
        /proc/net/unix): a request must still neither read a file of another's (by its path
        or through /proc/self/root) nor make, remove or rename anything there, while it reads
        and writes its own
        and reads the rest of the filesystem (files, listings of / too, execs) as before;
        listing is not handled, so the names in another's directory are not hidden. Without the
        domain (no scoped Landlock) the sibling is readable, so the probe sees the
        difference."""
        base, other, reqdir, sub = self._landlock_dirs("zygo-ll-root-")
        sibling = os.path.join(base, "req-2")
        os.makedirs(os.path.join(sibling, "tmp"))
        os.mkdir(os.path.join(reqdir, "tmp"))
        with open(os.path.join(sibling, "event.json"), "w") as f:
            f.write('{"secret": "s"}')
        with open(os.path.join(reqdir, "event.json"), "w") as f:
            f.write("{}")
        with open(os.path.join(other, "readable"), "w") as f:
            f.write("r")

        def read(path):
            return _errno_of(lambda: open(path, "rb").close())

        def probe(entering):
            child.REQUEST_ROOT = base
            child._rehearse()
            entered = entering and child.enter_own_domain(child.writable_dirs(reqdir))
            staged = os.path.join(reqdir, "tmp", "forged")
            with open(staged, "w") as f:
                f.write("{}")
            return " ".join([str(entered),
                             read(os.path.join(sibling, "event.json")),
                             read(f"/proc/self/root{sibling}/event.json"),
                             _errno_of(lambda: os.close(os.open(
                                 os.path.join(sibling, "result.json"),
                                 os.O_WRONLY | os.O_CREAT, 0o600))),
                             _errno_of(lambda: os.rename(staged,
                                                         os.path.join(sibling, "result.json"))),
                             _errno_of(lambda: os.mkfifo(os.path.join(sibling, "result.json"))),
                             _errno_of(lambda: os.unlink(os.path.join(sibling, "event.json"))),
                             _errno_of(lambda: os.mkdir(os.path.join(sibling, "d"))),
                             read(os.path.join(reqdir, "event.json")),
                             _errno_of(lambda: os.listdir(os.path.join(reqdir, "tmp"))),
                             read(os.path.join(other, "readable")), read("/etc/passwd"),
                             _errno_of(lambda: os.listdir("/usr")),
                             _errno_of(lambda: os.listdir("/")),
                             str(subprocess.run(["true"]).returncode)])

        out = _in_child(lambda: probe(True))
        if libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
            self.assertEqual(out, "True EACCES EACCES EACCES EACCES EACCES EACCES EACCES "
                                  "ok ok ok ok ok ok 0")
        else:
            self.assertEqual(out.split()[0], "False", "no scoping: the request must carry on")
        self.assertEqual(sorted(os.listdir(sibling)), ["event.json", "tmp"], "nothing made")
        out = _in_child(lambda: probe(False))  # the same probe, outside the domain
        self.assertEqual(out, "False ok ok ok ok EEXIST ok ok ok ok ok ok ok ok 0")

    def test_plan_leaves_out_only_the_request_root(self):
        """domain_plan grants reading files beneath every entry of / and of each directory on the
        way to REQUEST_ROOT but the one on the way; with no such directory, beneath /."""
        base, _, reqdir, _ = self._landlock_dirs("zygo-ll-plan-")

        def probe(root):
            child.REQUEST_ROOT = root
            return child.domain_plan()

        plan = probe(base)
        reads = {p for p, rights, _ in plan if rights & libc.LANDLOCK_ACCESS_FS_READ_FILE}
        self.assertNotIn("/", reads)
        self.assertFalse([p for p in reads if p == base or p.startswith(base + "/")], reads)
        self.assertIn("/usr", reads)
        tmp = os.path.dirname(base)
        self.assertFalse([p for p in reads if p == tmp])
        self.assertTrue(all(os.path.dirname(p) in ("/", tmp) for p in reads), reads)
        writes = {p for p, rights, _ in plan if rights & libc.LANDLOCK_ACCESS_FS_WRITE_FILE}
        self.assertIn("/dev", writes)
        self.assertNotIn(tmp, writes, "the request root is beneath it: split too")
        absent = probe(os.path.join(base, "absent"))
        self.assertIn(("/", child._READ, True), absent)

    def test_renames_between_writable_dirs_still_work(self):
        """A domain that handles file writes refuses every cross-directory rename (EXDEV)
        unless it also handles and grants LANDLOCK_ACCESS_FS_REFER: a temp file staged in
        TMPDIR and moved into place, or from the request dir to a sibling subdirectory, must
        move as it does without Landlock."""
        base = tempfile.mkdtemp(prefix="zygo-ll-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", base]))
        reqdir = os.path.join(base, "req-1")
        os.makedirs(os.path.join(reqdir, "tmp"))
        os.mkdir(os.path.join(reqdir, "out"))

        def probe():
            entered = child.enter_own_domain(child.writable_dirs(reqdir))
            staged = os.path.join(reqdir, "tmp", "staged")
            with open(staged, "w") as f:
                f.write("x")
            moves = [_errno_of(lambda: os.rename(staged, os.path.join(reqdir, "placed"))),
                     _errno_of(lambda: os.rename(os.path.join(reqdir, "placed"),
                                                 os.path.join(reqdir, "out", "placed"))),
                     _errno_of(lambda: os.link(os.path.join(reqdir, "out", "placed"),
                                               os.path.join(reqdir, "tmp", "linked")))]
            return " ".join([str(entered)] + moves)

        out = _in_child(probe)
        if libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
            self.assertEqual(out, "True ok ok ok")
        else:
            self.assertEqual(out.split()[0], "False", "no scoping: the request must carry on")

    def test_warmup_check(self):
        self.assertEqual(warmup.check_landlock("fork", abi=7)["level"], "info")
        self.assertTrue(warmup.check_landlock("fork", abi=7)["scoped"])
        for abi in (0, 5):
            check = warmup.check_landlock("fork", abi=abi)
            self.assertEqual(check["level"], "warn")
            self.assertIn("signal the zygote", check["detail"])
        self.assertEqual(warmup.check_landlock("spawn", abi=0)["level"], "info")
        real = warmup.check_landlock("fork")
        self.assertEqual(real["abi"], libc.landlock_abi())


class ResultTest(unittest.TestCase):
    def test_encode_result(self):
        self.assertEqual(child.encode_result({"ok": True, "value": ("ok", 0)}),
                         b'{"ok": true, "value": ["ok", 0]}')
        for value in (float("inf"), object(), {1}):
            with self.subTest(value=value):
                encoded = child.encode_result({"ok": True, "value": value})
                self.assertIn(b'"ok": false', encoded)
                self.assertIn(b"not JSON-serialisable", encoded)

    def test_describe_survives_broken_str(self):
        class Broken(Exception):
            def __str__(self):
                raise RuntimeError("no")
        described = errors.describe(Broken())
        self.assertEqual(described["type"], "Broken")
        self.assertIn("str() failed", described["message"])

    def test_describe_bounds_sizes(self):
        described = errors.describe(ValueError("m" * 100000))
        self.assertLess(len(described["message"]), errors.MAX_MESSAGE + 100)


if __name__ == "__main__":
    unittest.main()


class EventDecodeTest(unittest.TestCase):
    """What Python's JSON parser refuses is a rejected event (the caller's error), named."""

    def test_refused_documents_are_rejected_events(self):
        cases = {
            "deep nesting": b"[" * 100_000 + b"]" * 100_000,
            "5000-digit integer": b"1" * 5000,
            "invalid UTF-8": b'"\xff\xfe"',
            "not JSON": b"{",
        }
        for name, data in cases.items():
            with self.subTest(name):
                with self.assertRaises(child._EventRejected) as caught:
                    child.decode_event(data)
                result = child.rejected_event(caught.exception.__cause__)
                self.assertEqual(result["rejected"], "event")
                self.assertFalse(result["ok"])
                self.assertTrue(result["error"]["message"].startswith("event: "))
                self.assertEqual(result["error"]["type"], "EventRejected")

    def test_ordinary_events_decode(self):
        self.assertEqual(child.decode_event(b'{"n": [1, 2.5, "x"]}'), {"n": [1, 2.5, "x"]})
        self.assertEqual(child.decode_event(b"9" * 4300), int("9" * 4300))


class SearchPathTest(unittest.TestCase):
    """What the loader puts in front of sys.path: the code, python_path, then PYTHONPATH."""

    def test_order(self):
        self.assertEqual(loader.search_path("/code", ["vendor", "lib/deps"], "extra::/opt/x"),
                         ["/code", "/code/vendor", "/code/lib/deps", "/code/extra", "/opt/x"])

    def test_code_only(self):
        self.assertEqual(loader.search_path("/code"), ["/code"])

    def test_load_handler_imports_from_python_path(self):
        with tempfile.TemporaryDirectory() as code:
            os.makedirs(os.path.join(code, "vendor"))
            with open(os.path.join(code, "vendor", "zygo_vendored_dep.py"), "w") as f:
                f.write("VALUE = 41\n")
            with open(os.path.join(code, "zygo_vendored_main.py"), "w") as f:
                f.write("import zygo_vendored_dep\ndef handler(e, c):\n    return zygo_vendored_dep.VALUE + 1\n")
            saved = list(sys.path)
            try:
                handler = loader.load_handler(code, "zygo_vendored_main:handler", ["vendor"])
                self.assertEqual(handler(None, None), 42)
                self.assertEqual(sys.path[:2], [code, os.path.join(code, "vendor")])
            finally:
                sys.path[:] = saved
