"""The native-randomness guard (agents/native/zygo_rand.c) and zygo_agent.nativerand.

The end-to-end tests (test/e2e/nativerand_test.go) run the same libraries in bubblewrap
through the daemon; these run the agent under the fake supervisor, with the guard preloaded
as the supervisor does, and test the record parsing and known-module list on their own."""

import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

import harness
from test_protocol import AgentTest, check

from zygo_agent import nativerand, reseed

REPO = os.path.abspath(os.path.join(harness.AGENT_DIR, "..", ".."))
NATIVE_SRC = os.path.join(REPO, "test", "e2e", "testdata", "nativerand")
GUARD_SRC = os.path.join(REPO, "agents", "native", "zygo_rand.c")
MAIN = """
import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtoken.so"))

def handler(event, context):
    buf = ctypes.create_string_buffer(16)
    _lib.zygo_token(buf)
    return {"token": buf.raw.hex(), "ld_preload": os.environ.get("LD_PRELOAD")}
"""


def compile_shared(out, src, *libs):
    gcc = shutil.which("gcc")
    if gcc is None:
        raise AssertionError("gcc is needed to build the test libraries: apt-get install gcc")
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src, *libs],
                   check=True, capture_output=True)


class GuardTest(AgentTest):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="zygo-nativerand-")
        cls.guard = os.path.join(cls.tmp, "zygo_rand.so")
        compile_shared(cls.guard, GUARD_SRC, "-ldl")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def function(self, src):
        code = tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(code, "main.py"), "w") as f:
            f.write(MAIN)
        compile_shared(os.path.join(code, "libtoken.so"), os.path.join(NATIVE_SRC, src))
        return code

    def test_names_each_library_that_drew_at_import(self):
        for src, via in (("getrandom_buf.c", "getrandom"),
                         ("urandom_buf.c", "fread(/dev/*random)")):
            with self.subTest(src=src):
                agent, ready = self.start(self.function(src), env={"LD_PRELOAD": self.guard})
                c = check(ready, "native_random")
                self.assertEqual(c["level"], "warn", c)
                self.assertEqual(c["count"], 1, c)
                self.assertIn("libtoken.so", c["detail"])
                self.assertIn(via, c["detail"])
                self.assertIn('mode = "spawn"', c["detail"])
                mine = [i for i in c["items"] if i["library"].endswith("/libtoken.so")]
                self.assertTrue(mine and all(i["handled"] is None for i in mine), c["items"])
                self.assertEqual(sum(i["bytes"] for i in mine), 16, mine)
                # The interpreter's own draws are listed as handled, never warned about.
                others = [i for i in c["items"] if not i["library"].endswith("/libtoken.so")]
                self.assertTrue(all(i["handled"] for i in others), others)
                results = [agent.invoke({}) for _ in range(2)]
                values = [r.result["value"] for r in results]
                self.assertIsNone(values[0]["ld_preload"])
                self.assertEqual(values[0]["token"], values[1]["token"],
                                 "forked requests share the library's buffer: what is reported")

    def test_without_the_guard_says_so(self):
        _, ready = self.start(self.function("getrandom_buf.c"))
        c = check(ready, "native_random")
        self.assertEqual((c["level"], c["count"]), ("warn", -1), c)
        self.assertIn("not loaded", c["detail"])

    def test_spawn_mode_needs_no_guard(self):
        _, ready = self.start(self.function("getrandom_buf.c"), mode="spawn")
        c = check(ready, "native_random")
        self.assertEqual((c["level"], c["count"]), ("info", 0), c)

    def test_a_plain_function_draws_nothing_native(self):
        _, ready = self.start("basic", env={"LD_PRELOAD": self.guard})
        c = check(ready, "native_random")
        self.assertEqual((c["level"], c["count"]), ("info", 0), c)


class RecordsTest(unittest.TestCase):
    def test_parse(self):
        draws = nativerand.parse_records(
            "getrandom\t16\t1\t1\t/code/libtoken.so\nfopen(/dev/*random)\t0\t2\t0\t/x.so\n"
            "dropped\t3\n")
        self.assertEqual(draws[0], nativerand.Draw("getrandom", 16, 1, True, "/code/libtoken.so"))
        self.assertEqual(draws[1].calls, 2)
        self.assertEqual((draws[2].function, draws[2].calls), ("dropped", 3))

    def test_handled(self):
        self.assertIsNotNone(nativerand.handled_reason(sys.executable))
        self.assertIsNotNone(nativerand.handled_reason("/usr/lib/x86_64-linux-gnu/libcrypto.so.3"))
        self.assertIsNotNone(nativerand.handled_reason("/usr/lib/libpython3.12.so.1.0"))
        self.assertIsNone(nativerand.handled_reason("/code/libtoken.so"))
        self.assertIsNone(nativerand.handled_reason("/usr/lib/libssl.so.3"))


class KnownTest(unittest.TestCase):
    def tearDown(self):
        for name in ("fastrand", "uuid_utils"):
            sys.modules.pop(name, None)
        nativerand.known_modules()

    def test_known_module_with_a_seeder_is_reseeded_in_children(self):
        seeds = []
        sys.modules["fastrand"] = types.SimpleNamespace(pcg32_seed=seeds.append)
        known = nativerand.known_modules()
        self.assertIn(("fastrand", "reseeded in every child"),
                      [(k["module"], k["action"]) for k in known])
        self.assertIn("native_known", reseed.reseed_all())
        reseed.reseed_all()
        self.assertEqual(len(seeds), 2)
        self.assertNotEqual(seeds[0], seeds[1])

    def test_known_module_without_a_seeder_is_reported(self):
        sys.modules["uuid_utils"] = types.SimpleNamespace()
        known = nativerand.known_modules()
        self.assertTrue(known[0]["action"].startswith("reported"), known)
        self.assertIn("rust-random/rand", known[0]["source"])


if __name__ == "__main__":
    unittest.main()
