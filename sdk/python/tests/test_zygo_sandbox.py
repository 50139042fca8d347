"""Unit tests of zygo_sandbox on this host, with a temporary directory standing in for
/run/zygo. The test inside a real sandbox (checkpoint, fork, rollback) is
internal/sandbox/gvisor/watchers_test.go.

    cd sdk/python && /usr/bin/python3 -m unittest discover -s tests
"""
import os
import random
import shutil
import ssl
import sys
import tempfile
import uuid
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import zygo_sandbox  # noqa: E402
from zygo_sandbox import generation  # noqa: E402


def publish(d, gen):
    """Publishes gen the way zygo-guest does: identity first, then the generation, by rename."""
    for name, data in (("identity.json", '{"generation": "%s"}' % gen), ("generation", gen)):
        tmp = os.path.join(d, "." + name + ".tmp")
        with open(tmp, "w") as f:
            f.write(data)
        os.rename(tmp, os.path.join(d, name))


class WatcherTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="zygo-run-")
        self.addCleanup(shutil.rmtree, self.dir)
        self.old = generation.RUN_DIR
        generation.RUN_DIR = self.dir
        self.addCleanup(setattr, generation, "RUN_DIR", self.old)
        publish(self.dir, "a" * 32)

    def wait_for(self, cond, timeout=2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.01)
        return cond()

    def test_baseline_then_once_per_generation(self):
        calls = []
        w = generation.Watcher(interval=0.05)
        w.add(lambda gen, ident: calls.append((gen, ident.get("generation"))))
        w.start()
        self.addCleanup(w.stop)
        time.sleep(0.2)
        self.assertEqual(calls, [], "the baseline generation must not call back")
        publish(self.dir, "b" * 32)
        self.assertTrue(self.wait_for(lambda: len(calls) == 1), "no callback for a new generation")
        time.sleep(0.3)
        self.assertEqual(calls, [("b" * 32, "b" * 32)], "one call per generation, with its identity")
        publish(self.dir, "c" * 32)
        self.assertTrue(self.wait_for(lambda: len(calls) == 2))
        self.assertEqual(calls[1][0], "c" * 32)

    def test_check_runs_pending_callbacks_in_the_caller(self):
        seen = []
        w = generation.Watcher(interval=60)  # the thread is not started: only check() runs them
        w.add(lambda gen, ident: seen.append(threading.current_thread()))
        self.assertFalse(w.check())
        publish(self.dir, "d" * 32)
        self.assertTrue(w.check())
        self.assertFalse(w.check(), "a second check for the same generation")
        self.assertEqual(seen, [threading.current_thread()])

    def test_latency_within_interval(self):
        got = threading.Event()
        w = generation.Watcher(interval=0.1)
        w.add(lambda gen, ident: got.set())
        w.start()
        self.addCleanup(w.stop)
        t0 = time.monotonic()
        publish(self.dir, "e" * 32)
        self.assertTrue(got.wait(2))
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_failing_callback_does_not_stop_others(self):
        seen = []
        w = generation.Watcher(interval=60)

        def bad(gen, ident):
            raise RuntimeError("boom")

        w.add(bad)
        w.add(lambda gen, ident: seen.append(gen))
        publish(self.dir, "f" * 32)
        stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
        try:
            w.check()
        finally:
            sys.stderr.close()
            sys.stderr = stderr
        self.assertEqual(seen, ["f" * 32])

    def test_outside_a_sandbox(self):
        generation.RUN_DIR = os.path.join(self.dir, "missing")
        self.assertIsNone(zygo_sandbox.current())
        self.assertEqual(zygo_sandbox.identity(), {})
        self.assertFalse(generation.Watcher().check())


class ReseedTest(unittest.TestCase):
    def test_reseed_changes_what_a_copy_would_repeat(self):
        import numpy as np  # /usr/bin/python3 has it (apt install python3-numpy)

        mine = random.Random(7)
        legacy = np.random.RandomState(7)
        gen = np.random.default_rng(7)
        state = (random.getstate(), np.random.get_state(), mine.getstate(), legacy.get_state(),
                 gen.bit_generator.state)

        def draws():
            return (random.random(), float(np.random.random()), mine.random(), legacy.random(),
                    float(gen.random()))

        before = draws()
        random.setstate(state[0])
        np.random.set_state(state[1])
        mine.setstate(state[2])
        legacy.set_state(state[3])
        gen.bit_generator.state = state[4]
        self.assertEqual(draws(), before, "restoring the state repeats the draws (what a copy does)")
        random.setstate(state[0])
        np.random.set_state(state[1])
        zygo_sandbox.reseed(mine, legacy, gen)
        after = draws()
        for i, (a, b) in enumerate(zip(before, after)):
            self.assertNotEqual(a, b, "generator %d was not reseeded" % i)

    def test_all_generators_and_tempfile(self):
        hidden = {"r": random.Random(3)}
        first = random.Random(3).random()
        _ = next(tempfile._get_candidate_names())
        seq = tempfile._name_sequence
        ssl.RAND_bytes(16)
        zygo_sandbox.reseed(all_generators=True)
        self.assertNotEqual(hidden["r"].random(), first)
        self.assertIsNot(tempfile._get_candidate_names(), seq)

    def test_uuid1_clock_sequence_is_renewed(self):
        # libuuid keeps uuid1's clock sequence in process memory: every copy would repeat it.
        uuid.uuid1()
        self.addCleanup(setattr, uuid, "_generate_time_safe", uuid._generate_time_safe)
        ran = zygo_sandbox.reseed()
        self.assertIn("uuid1", ran)
        self.assertIsNone(uuid._generate_time_safe)
        self.assertIsNone(uuid._last_timestamp)
        seqs = {uuid.uuid1().clock_seq for _ in range(8)}
        self.assertGreater(len(seqs), 1, "uuid1 draws a fresh clock sequence from random")

    def test_reseedcore_is_the_agents(self):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        agent = os.path.join(here, "..", "..", "agents", "python", "zygo_agent", "reseedcore.py")
        with open(os.path.join(here, "zygo_sandbox", "reseedcore.py"), "rb") as a, \
                open(agent, "rb") as b:
            self.assertEqual(a.read(), b.read(), "run `go generate ./agents` after editing it")

    def test_auto_reseed_registers_on_the_shared_watcher(self):
        old_default = generation._default
        self.addCleanup(setattr, generation, "_default", old_default)
        generation._default = generation.Watcher(interval=60)
        generation._default._thread = object()  # pretend started: no thread in this test
        cb = zygo_sandbox.auto_reseed()
        self.assertIn(cb, generation._default._callbacks)


if __name__ == "__main__":
    unittest.main()
