"""The one test suite of ``reseedcore``, the reseed module the function agent, the in-sandbox
SDK (a byte-for-byte copy, checked by ``TestSDKReseedCoreIsTheAgents`` in ``agents``) and the
guest's code interpreter (the same source, embedded) share.

A copy of a process is simulated two ways: by real ``os.fork`` siblings (uuid1, whose state is
in libuuid's memory), and by putting a generator back into the state a copy
would wake up with (what a restored sandbox does; CPython's own at-fork reseed of ``random``
does not run there). Each test first shows that without the reseed the copy repeats.
"""

import os
import random
import ssl
import sys
import tempfile
import types
import unittest
import uuid
import _random

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import numpy as np
except ImportError as exc:  # fail loudly, never skip
    raise ImportError("python3-numpy is needed by these tests: apt-get install python3-numpy") \
        from exc

from zygo_agent import reseedcore  # noqa: E402


def _siblings(draw, reseed, n=2):
    """Fork ``n`` children of this process; each runs ``reseed`` (or nothing, if None) and then
    ``draw``, and sends back ``repr`` of the result. Returns the list of those strings."""
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(r)
                if reseed is not None:
                    reseed()
                data = repr(draw()).encode()
            except BaseException as exc:  # noqa: BLE001 - sent to the parent as the result
                data = ("child failed: %r" % (exc,)).encode()
            os.write(w, data)
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        os.waitpid(pid, 0)
        out.append(b"".join(chunks).decode())
    for o in out:
        if o.startswith("child failed"):
            raise AssertionError(o)
    return out


class ForkSiblingsTest(unittest.TestCase):
    def test_uuid1_clock_sequence(self):
        uuid.uuid1()  # the parent used it: libuuid holds a clock sequence in its memory
        saved = (uuid._generate_time_safe, uuid._last_timestamp)
        self.addCleanup(setattr, uuid, "_generate_time_safe", saved[0])
        self.addCleanup(setattr, uuid, "_last_timestamp", saved[1])

        def seqs():
            return [uuid.uuid1().clock_seq for _ in range(4)]

        if uuid._generate_time_safe is not None:  # CPython built with libuuid: show the defect
            a, b = _siblings(seqs, None)
            self.assertEqual(a, b, "without the reseed, libuuid repeats its clock sequence")
        a, b = _siblings(seqs, reseedcore.reseed_all)
        self.assertNotEqual(a, b, "uuid1 clock sequences repeat in reseeded siblings")


class RestoredCopyTest(unittest.TestCase):
    """Each generator is put back into one saved state twice; the second time the reseed runs."""

    def assertCopyDiverges(self, save, restore, draw, **kwargs):
        state = save()
        first = draw()
        restore(state)
        self.assertEqual(draw(), first, "restoring the state repeats the draws (what a copy does)")
        restore(state)
        ran = reseedcore.reseed_all(**kwargs)
        self.assertNotEqual(draw(), first, "the reseed did not renew it")
        return ran

    def test_global_random(self):
        self.assertCopyDiverges(random.getstate, random.setstate, lambda: random.getrandbits(64))

    def test_numpy_global(self):
        ran = self.assertCopyDiverges(np.random.get_state, np.random.set_state,
                                      lambda: int(np.random.randint(0, 2**62)))
        self.assertIn("numpy_global", ran)

    def test_generator_objects_passed(self):
        mine, bare = random.Random(7), _random.Random(7)
        legacy, gen = np.random.RandomState(7), np.random.default_rng(7)
        bitgen = np.random.PCG64(7)
        objs = [mine, bare, legacy, gen, bitgen]
        for i, obj in enumerate(objs):
            with self.subTest(kind=type(obj).__name__):
                st = getattr(obj, "bit_generator", obj)
                if isinstance(obj, np.random.RandomState):
                    save, restore = obj.get_state, obj.set_state
                elif hasattr(st, "state") and not isinstance(obj, _random.Random):
                    save, restore = (lambda st=st: st.state), (lambda s, st=st: setattr(st, "state", s))
                else:
                    save, restore = obj.getstate, obj.setstate
                draw = {0: lambda: mine.getrandbits(64), 1: lambda: bare.getrandbits(64),
                        2: lambda: int(legacy.randint(0, 2**62)),
                        3: lambda: int(gen.integers(0, 2**62)),
                        4: lambda: int(bitgen.random_raw())}[i]
                self.assertCopyDiverges(save, restore, draw, generators=[obj])

    def test_generators_callable_is_read_at_reseed_time(self):
        late = []
        found = lambda: late  # noqa: E731 - what warm-up fills in after the call is set up
        r = random.Random(1)
        late.append(r)
        self.assertCopyDiverges(r.getstate, r.setstate, lambda: r.getrandbits(64),
                                generators=found)

    def test_temp_names(self):
        # tempfile renews its name generator when the pid changes (a fork), not in a restored
        # copy, which keeps the pid: there it repeats the names of every sibling.
        next(tempfile._get_candidate_names())

        def names():
            seq = tempfile._get_candidate_names()
            return [next(seq) for _ in range(3)]

        self.assertCopyDiverges(lambda: tempfile._name_sequence.rng.getstate(),
                                lambda s: tempfile._get_candidate_names().rng.setstate(s), names)

    def test_all_generators_reaches_hidden_ones(self):
        hidden = {"r": random.Random(3), "np": np.random.default_rng(3),
                  "rs": np.random.RandomState(3)}
        before = (hidden["r"].getstate(), hidden["np"].bit_generator.state["state"],
                  hidden["rs"].get_state()[1].tobytes())
        reseedcore.reseed_all()
        self.assertEqual(hidden["r"].getstate(), before[0], "without the sweep it is left alone")
        reseedcore.reseed_all(all_generators=True)
        self.assertNotEqual(hidden["r"].getstate(), before[0])
        self.assertNotEqual(hidden["np"].bit_generator.state["state"], before[1])
        self.assertNotEqual(hidden["rs"].get_state()[1].tobytes(), before[2])


class HooksTest(unittest.TestCase):
    def test_hook_names_and_post_conditions(self):
        uuid.uuid1()
        tempfile.gettempdir()
        next(tempfile._get_candidate_names())
        saved = (uuid._generate_time_safe, tempfile.tempdir)
        self.addCleanup(setattr, uuid, "_generate_time_safe", saved[0])
        ran = reseedcore.reseed_all(extra=[("mine", lambda: None)])
        self.assertEqual(ran, ["random", "numpy_global", "torch", "openssl", "uuid1", "tempfile",
                               "generators", "mine"])
        self.assertIsNone(uuid._generate_time_safe)
        self.assertIsNone(uuid._last_timestamp)
        self.assertIsNotNone(uuid._node, "the hardware address is kept (no `ip` in the pure path)")
        self.assertIsNone(tempfile._name_sequence)
        self.assertEqual(tempfile.tempdir, saved[1], "tempdir is kept unless asked")
        reseedcore.reseed_all(forget_tempdir=True)
        self.assertIsNone(tempfile.tempdir)

    def test_openssl_gets_fresh_bytes(self):
        seen = []
        real = ssl.RAND_add
        ssl.RAND_add = lambda b, entropy: seen.append((b, entropy))
        try:
            reseedcore.reseed_all()
            reseedcore.reseed_all()
        finally:
            ssl.RAND_add = real
        self.assertEqual([len(b) for b, _ in seen], [32, 32])
        self.assertNotEqual(seen[0][0], seen[1][0])

    def test_skip_leaves_a_hook_out(self):
        seen = []
        real = ssl.RAND_add
        ssl.RAND_add = lambda b, entropy: seen.append(b)
        try:
            ran = reseedcore.reseed_all(skip=("openssl",))
        finally:
            ssl.RAND_add = real
        self.assertEqual(seen, [])
        self.assertNotIn("openssl", ran)
        self.assertIn("random", ran)

    def test_torch_when_imported(self):
        seeds = []
        fake = types.ModuleType("torch")
        fake.manual_seed = seeds.append
        sys.modules["torch"] = fake
        try:
            reseedcore.reseed_all()
            reseedcore.reseed_all()
        finally:
            del sys.modules["torch"]
        self.assertEqual(len(seeds), 2)
        self.assertNotEqual(seeds[0], seeds[1])
        self.assertTrue(all(0 <= s < 2**63 for s in seeds))

    def test_every_hook_runs_and_failures_are_reported(self):
        r = random.Random(1)
        state = r.getstate()
        with self.assertRaises(reseedcore.ReseedError) as cm:
            reseedcore.reseed_all(generators=[object(), r],
                                  extra=[("boom", lambda: 1 / 0), ("after", lambda: None)])
        self.assertEqual([name for name, _ in cm.exception.failures], ["generators", "boom"])
        self.assertIsInstance(cm.exception.failures[0][1], TypeError)
        self.assertEqual(r.getstate(), state, "a bad object stops its own hook, not the others")
        with self.assertRaises(TypeError):
            reseedcore.reseed_object("not a generator")


class EntropyTest(unittest.TestCase):
    def test_seed_is_mixed_with_the_kernel(self):
        real = os.urandom
        os.urandom = lambda n: b"\0" * n  # a copy whose kernel randomness was shared
        try:
            a, b, c = (reseedcore.Entropy(s).draw(100) for s in (b"one", b"one", b"two"))
            plain = reseedcore.Entropy().draw(16)
        finally:
            os.urandom = real
        self.assertEqual(a, b)
        self.assertNotEqual(a, c, "the seed changes the draws")
        self.assertEqual(len(a), 100)
        self.assertEqual(plain, b"\0" * 16, "without a seed it is os.urandom itself")
        self.assertNotEqual(reseedcore.Entropy(b"one").draw(32), reseedcore.Entropy(b"one").draw(32),
                            "the same seed in two copies still differs by the kernel's bytes")

    def test_draws_do_not_repeat_within_one_entropy(self):
        e = reseedcore.Entropy(b"seed")
        self.assertNotEqual(e.draw(32), e.draw(32))
        self.assertEqual(len(e.words(8)), 8)


if __name__ == "__main__":
    unittest.main()
