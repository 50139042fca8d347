"""Fork-safety cases from shared/cases/fork-safety-cases.md, run FORK-N style against the
real agent: the warm-up block is the fixture's import, the handler runs in N children."""

import os
import shutil
import ssl
import sys
import tempfile
import unittest

import harness
from test_protocol import AgentTest, check

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from zygo_agent import reseed  # noqa: E402

N = 11


def events(n=N):
    return [{"id": str(i)} for i in range(n)]


class CasesTest(AgentTest):
    def test_BH01_numpy_global_distinct(self):
        agent, ready = self.start("bh01_numpy")
        self.assertEqual(check(ready, "numpy_global")["level"], "warn")
        values = [r.value for r in agent.invoke_many(events())]
        self.assertEqual(len({v[0] for v in values}), N, "NumPy values repeat")
        self.assertEqual(len({v[1] for v in values}), N, "stdlib random values repeat")

    def test_BH04_openssl_rand_bytes_distinct(self):
        agent, ready = self.start("bh04_ssl")
        self.assertIn(check(ready, "libcrypto")["level"], ("info", "warn"))
        values = [r.value for r in agent.invoke_many(events())]
        self.assertEqual(len(set(values)), N)

    def test_BH04_openssl_reseeds_itself_after_fork(self):
        # This machine's OpenSSL (3.0 on Debian) is fork-protected, so the agent skips its
        # ssl.RAND_add in forked children; RAND_bytes must still differ in every child,
        # pre-warmed or hurried, because OpenSSL reseeds from the kernel itself.
        self.assertTrue(reseed.openssl_reseeds_after_fork(ssl.OPENSSL_VERSION,
                                                          ssl.OPENSSL_VERSION_INFO),
                        f"{ssl.OPENSSL_VERSION}: this test needs OpenSSL 1.1.1d or later")
        agent, ready = self.start("openssl_fork")
        self.assertIn("reseeds its generators from the OS", check(ready, "libcrypto")["detail"])
        values = [r.value for r in agent.invoke_many(events())]
        values += [agent.invoke({"id": "h%d" % i}, hurry=True).value for i in range(3)]
        self.assertEqual(len({v["bytes"] for v in values}), N + 3)
        self.assertEqual({v["rand_add"] for v in values}, {0}, "the agent called ssl.RAND_add")

    def test_BH09_uuid1_distinct(self):
        agent, ready = self.start("bh09_uuid1")
        self.assertEqual(check(ready, "uuid1")["level"], "warn")
        self.assertIn("uuid4", check(ready, "uuid1")["detail"])
        uuids = [u for r in agent.invoke_many(events()) for u in r.value]
        self.assertEqual(len(uuids), 3 * N)
        self.assertEqual(len(set(uuids)), 3 * N)

    def test_BH11_rule10_thread_at_warmup_refuses_fork(self):
        agent, ready = self.start("bh11_thread")
        threads = check(ready, "threads")
        self.assertIs(ready["fork_safe"], False)
        self.assertEqual(threads["level"], "warn")
        self.assertIn("chatter", threads["detail"])
        self.assertIn("chatter", [i["python"] for i in threads["items"]])
        request = agent.fork({"id": "1"})
        self.assertEqual(request.answer["type"], "fork_error")
        self.assertIn("chatter", request.answer["error"])
        # The zygote closed the descriptor it was given: our end sees end of stream.
        self.assertIsNone(harness.recv(request.sock, 5)[0])
        self.assertEqual(agent.stop(), 0)

    def test_BH12_native_pool_single_threaded(self):
        agent, ready = self.start("bh12_blas")
        self.assertEqual(check(ready, "threads")["count"], 1)
        self.assertIs(ready["fork_safe"], True)
        for i in range(50):  # liveness: each child must finish; 5 s is a hang detector
            request = agent.fork({"id": str(i)})
            request.hello()
            request.go()
            request.wait(timeout=5)
            self.assertEqual(request.value, 128.0 ** 3)
        self.assertEqual(agent.stop(), 0)
        self.assertIn("zygote threads: 1\n", agent.stdout)

    def test_BH12_native_thread_named_and_fork_refused(self):
        agent, ready = self.start("native_thread")
        threads = check(ready, "threads")
        self.assertIs(ready["fork_safe"], False)
        self.assertEqual((threads["level"], threads["count"]), ("warn", 2))
        self.assertIn("nativeworker x1 (native)", threads["detail"])
        self.assertEqual(agent.fork({"id": "1"}).answer["type"], "fork_error")

    def test_BH14_asyncio_loop_not_inherited(self):
        agent, ready = self.start("bh14_asyncio")
        self.assertEqual(check(ready, "asyncio_loop")["level"], "warn")
        requests = agent.invoke_many(events(20))
        for r in requests:
            self.assertEqual(r.value, ["ok", 0])
            self.assertNotIn("zygote timer", r.stdout)
        self.assertEqual(agent.stop(), 0)
        self.assertNotIn("zygote timer", agent.stdout)

    def test_BH17_rule6_flush_before_fork(self):
        agent, _ = self.start("bh17_stdout")
        requests = agent.invoke_many(events())
        self.assertEqual(agent.stop(), 0)
        logs = agent.stdout + "".join(r.stdout for r in requests)
        self.assertEqual(logs.count("\nwarmup-marker") + logs.startswith("warmup-marker"), 1)
        self.assertEqual(logs.count("c-warmup-marker"), 1)
        for r in requests:
            self.assertEqual(r.stdout, f"child {r.event['id']}\n")

    def test_BH18_rule5_atexit_only_request_scoped(self):
        marker_dir = tempfile.mkdtemp(prefix="zygo-bh18-")
        self.addCleanup(shutil.rmtree, marker_dir, True)
        marker = os.path.join(marker_dir, "zygote.alive")
        agent, _ = self.start("bh18_atexit", env={"ZYGO_TEST_MARKER": marker})
        requests = agent.invoke_many(events(10))
        self.assertTrue(os.path.exists(marker), "a child ran the zygote's atexit handler")
        for r in requests:
            self.assertEqual(r.stdout, f"child-exit {r.event['id']}\n")
        self.assertEqual(agent.stop(), 0)
        # The zygote's own exit does run its handlers, once.
        self.assertEqual(agent.stdout.count("zygote-exit"), 1)
        self.assertFalse(os.path.exists(marker))

    def test_BH19_tempfile_names_and_private_tmpdir(self):
        shared = tempfile.mkdtemp(prefix="zygo-bh19-")
        self.addCleanup(shutil.rmtree, shared, True)
        agent, _ = self.start("bh19_tempfile", env={"ZYGO_TEST_SHARED": shared})
        requests = agent.invoke_many(events())
        paths = []
        for r in requests:
            path, tmpdir = r.value
            paths.append(path)
            self.assertEqual(tmpdir, os.path.join(r.dir, "tmp"))
            with open(path) as f:
                self.assertEqual(f.read(), r.event["id"])
        self.assertEqual(len(set(paths)), N)


if __name__ == "__main__":
    unittest.main()
