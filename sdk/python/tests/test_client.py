"""The zygo client against a real daemon (tests/realdaemon.py): functions deployed, invoked and
logged; a gVisor sandbox exec'd (streaming too), run_code, files, checkpoint, fork, rollback,
generation and kill; errors mapped to their classes with the daemon's message; TCP with the
token found as the CLI finds it.

    cd sdk/python && sudo /usr/bin/python3 -m unittest discover -s tests
"""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from realdaemon import Daemon  # noqa: E402
from test_pack import ZYGOIGNORE_DIR_PACKED, zygoignore_dir  # noqa: E402

import zygo  # noqa: E402

D = None


def setUpModule():
    global D
    D = Daemon()
    D.start()


def tearDownModule():
    if D is not None:
        D.stop()


def function_dir(name, main_py):
    """A function directory named name whose main.py is main_py, removed at the end."""
    d = tempfile.mkdtemp(prefix="zpy-fn-")
    unittest.addModuleCleanup(shutil.rmtree, d, ignore_errors=True)
    with open(os.path.join(d, "zygo.toml"), "w") as f:
        f.write(f'name = "{name}"\nruntime = "python"\nhandler = "main:handler"\n')
    with open(os.path.join(d, "main.py"), "w") as f:
        f.write(textwrap.dedent(main_py))
    return d


class FunctionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = D.client()
        cls.dir = function_dir("pyecho", """
            def handler(event, context):
                print("echoing", event.get("n"))
                if event.get("fail"):
                    raise ValueError("asked to fail")
                return {"n": event.get("n"), "request_id": context.request_id}
        """)
        cls.deployed = cls.c.functions.deploy(cls.dir)

    def test_deploy_invoke_logs(self):
        self.assertEqual(self.deployed["name"], "pyecho")
        self.assertTrue(self.deployed["version"].startswith("sha256:"), self.deployed)
        again = self.c.functions.deploy(self.dir)
        self.assertTrue(again["unchanged"], again)

        r = self.c.functions.invoke("pyecho", {"n": 7})
        self.assertEqual(r.value["n"], 7)
        self.assertEqual(r.value["request_id"], r.request_id)
        self.assertEqual(r.version, self.deployed["version"])
        self.assertTrue(r.server_timing, "no Server-Timing phases")

        logs = self.c.functions.logs("pyecho", request_id=r.request_id)
        lines = [ln["line"] for ln in logs["lines"] if ln["stream"] == "stdout"]
        self.assertEqual(lines, ["echoing 7"])
        self.assertGreaterEqual(logs["next"], logs["lines"][-1]["id"])
        after = self.c.functions.logs("pyecho", request_id=r.request_id, after=logs["next"])
        self.assertEqual(after["lines"], [])

    def test_get_list_remove(self):
        d = function_dir("pytmp", "def handler(event, context):\n    return 1\n")
        self.c.functions.deploy(d)
        self.assertEqual(self.c.functions.get("pytmp")["name"], "pytmp")
        self.assertIn("pytmp", [f["name"] for f in self.c.functions.list()])
        self.assertIn("pytmp", [f["name"] for f in self.c.functions.list(page_size=1)])
        self.c.functions.remove("pytmp")
        with self.assertRaises(zygo.NotFound):
            self.c.functions.get("pytmp")

    def test_missing_function_is_not_found(self):
        with self.assertRaises(zygo.NotFound) as cm:
            self.c.functions.invoke("no-such-fn", {})
        e = cm.exception
        self.assertEqual((e.status, e.code), (404, "not_found"))
        self.assertEqual(str(e), 'function "no-such-fn" not found')

    def test_handler_error_carries_the_traceback(self):
        with self.assertRaises(zygo.HandlerError) as cm:
            self.c.functions.invoke("pyecho", {"fail": True})
        e = cm.exception
        self.assertIsInstance(e, zygo.InvokeError)
        self.assertEqual(e.status, 500)
        self.assertIn("asked to fail", e.message)
        self.assertIn("ValueError", e.traceback or "")
        self.assertTrue(e.request_id)

    def test_bad_input_names_the_field(self):
        with self.assertRaises(zygo.BadRequest) as cm:
            self.c.functions.logs("pyecho", limit=0)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("limit", str(cm.exception))

    def test_import_failure(self):
        d = function_dir("pybroken", "raise RuntimeError('broken at import')\n")
        with self.assertRaises(zygo.ImportFailed) as cm:
            self.c.functions.deploy(d)
        self.assertIn("broken at import", str(cm.exception))

    def test_pack_dir_refuses_a_link(self):
        d = function_dir("pylink", "def handler(e, c):\n    return 1\n")
        os.symlink("/etc/passwd", os.path.join(d, "passwd"))
        with self.assertRaisesRegex(ValueError, "passwd: not a regular file"):
            self.c.functions.deploy(d)

    def test_zygoignore_dir_deploys_as_zygo_up_does(self):
        # The same directory from `zygo up` (the Go SDK's PackDir) and from this client is the
        # same version, and what .zygoignore and the defaults leave out is not uploaded.
        d = zygoignore_dir("pyignore")
        out = subprocess.run([D.bin, "up", d, "--state-dir", D.state_dir, "-o", "json"], check=True,
                             capture_output=True, env=dict(os.environ, XDG_CONFIG_HOME=D.state_dir))
        by_go = json.loads(out.stdout)
        with tarfile.open(fileobj=io.BytesIO(zygo.pack_dir(d)), mode="r:gz") as tr:
            names = tr.getnames()
        self.assertEqual(names, [n.rstrip("/") for n, _ in ZYGOIGNORE_DIR_PACKED])
        by_client = self.c.functions.deploy(d)
        self.assertEqual(by_client["version"], by_go["version"])
        self.assertTrue(by_client["unchanged"], by_client)


class ContractTest(unittest.TestCase):
    """What every answer of the daemon carries (the API version) and its 405."""

    def test_the_daemon_speaks_this_api_version(self):
        self.assertEqual(D.client().status()["api_version"], zygo.API_VERSION)

    def test_a_wrong_method_is_method_not_allowed(self):
        with self.assertRaises(zygo.MethodNotAllowed) as cm:
            D.client()._t.call("PATCH", "/v1/functions")
        self.assertEqual(cm.exception.status, 405)
        self.assertIn("GET", cm.exception.allow)


class TCPTest(unittest.TestCase):
    """The daemon's TCP listener, with the token found as the CLI finds it."""

    def test_token_from_the_state_dir(self):
        c = zygo.Zygo(addr=D.addr, state_dir=D.state_dir)
        self.assertIn("version", c.status())

    def test_addr_and_token_from_the_environment(self):
        with open(os.path.join(D.state_dir, "api.token")) as f:
            token = f.read().strip()
        env = {"ZYGO_ADDR": D.addr, "ZYGO_TOKEN": token, "ZYGO_STATE_DIR": "/nonexistent"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            c = zygo.Zygo()
            self.assertEqual(c.where, D.addr)
            self.assertIn("version", c.status())
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_wrong_token_is_unauthenticated(self):
        with self.assertRaises(zygo.Unauthenticated) as cm:
            zygo.Zygo(addr=D.addr, token="wrong").status()
        self.assertEqual(cm.exception.status, 401)


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = D.client()
        cls.sb = cls.c.sandboxes.create(name="pysb", memory_mib=256)

    @classmethod
    def tearDownClass(cls):
        cls.sb.__exit__()

    def test_exec(self):
        r = self.sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"out\n", b"err\n"))
        r = self.sb.exec(["cat"], stdin="given whole", env=["A=1"], cwd="/tmp")
        self.assertEqual(r.stdout, b"given whole")
        r = self.sb.exec(["sh", "-c", "echo $A; pwd"], env=["A=1"], cwd="/tmp")
        self.assertEqual(r.stdout, b"1\n/tmp\n")

    def test_missing_program_exits_127(self):
        r = self.sb.exec(["no-such-program"])
        self.assertEqual(r.exit_code, 127)
        self.assertIn(b"no-such-program", r.stderr)

    def test_exec_streams_output_as_it_comes(self):
        # Each line is printed only after the client has received the one before: the
        # command waits for a file the loop below writes when it sees a line.
        script = "for i in 1 2 3; do echo $i; while [ ! -e /tmp/ack$i ]; do sleep 0.05; done; done"
        self.sb.exec(["sh", "-c", "rm -f /tmp/ack*"])
        seen = []
        with self.sb.exec_stream(["sh", "-c", script], timeout=120) as proc:
            for chunk in proc:
                self.assertEqual(chunk.stream, "stdout")
                seen.append(chunk.data)
                self.sb.files.write(f"/tmp/ack{chunk.data.decode().strip()}", b"")
        self.assertEqual(seen, [b"1\n", b"2\n", b"3\n"])
        self.assertEqual(proc.exit_code, 0)

    def test_exec_streams_stdin(self):
        chunks = [b"x" * 70000, b"y" * 5, b"z"]
        r = self.sb.exec(["sh", "-c", "wc -c; echo done >&2"], stdin=iter(chunks))
        self.assertEqual((r.stdout.strip(), r.stderr), (b"70006", b"done\n"))

    def test_stdin_that_fails_abandons_the_call(self):
        def chunks():
            yield b"partial"
            raise OSError("the disk went away")
        with self.assertRaises(zygo.ZygoError):
            self.sb.exec(["sh", "-c", "echo $$ >/tmp/abandoned.pid; exec cat >/tmp/abandoned"], stdin=chunks())
        # The command was killed, not left waiting for the rest of its stdin.
        r = self.sb.exec(["sh", "-c", "for i in $(seq 100); do kill -0 $(cat /tmp/abandoned.pid) 2>/dev/null || exit 0; "
                                      "sleep 0.1; done; exit 1"])
        self.assertEqual(r.exit_code, 0, "the abandoned command still runs")

    def test_run_code(self):
        r = self.sb.run_code("counter = 41\nprint('hi')\ncounter + 1")
        self.assertEqual((r.ok, r.value, r.stdout), (True, "42", "hi\n"))
        r = self.sb.run_code("counter / 0")
        self.assertFalse(r.ok)
        self.assertIn("ZeroDivisionError", r.error)
        self.assertEqual(self.sb.run_code("counter").value, "41")

    def test_files(self):
        self.sb.files.write("/tmp/pyfiles/a.txt", "alpha", mode=0o600)
        self.sb.files.write("/tmp/pyfiles/b.bin", bytes(range(256)))
        self.assertEqual(self.sb.files.read("/tmp/pyfiles/a.txt"), b"alpha")
        self.assertEqual(self.sb.files.read("/tmp/pyfiles/b.bin"), bytes(range(256)))
        ls = {e["name"]: e for e in self.sb.files.list("/tmp/pyfiles")}
        self.assertEqual(sorted(ls), ["a.txt", "b.bin"])
        self.assertEqual((ls["a.txt"]["size"], ls["a.txt"]["mode"] & 0o777), (5, 0o600))
        with self.assertRaises(zygo.NotFound):
            self.sb.files.read("/tmp/pyfiles/none")

    def test_get_and_list(self):
        self.assertEqual(self.c.sandboxes.get("pysb").id, self.sb.id)
        self.assertIn(self.sb.id, [s.id for s in self.c.sandboxes.list()])
        with self.assertRaises(zygo.NotFound) as cm:
            self.c.sandboxes.get("sb-0000000000000000")
        self.assertIn("sb-0000000000000000", str(cm.exception))

    def test_bad_input_names_the_field(self):
        with self.assertRaises(zygo.BadRequest) as cm:
            self.sb.fork(0)
        self.assertIn("n", str(cm.exception))
        with self.assertRaises(zygo.BadRequest) as cm:
            self.c.sandboxes.create(memory_mib=1)
        self.assertIn("memory_mib", str(cm.exception))
        with self.assertRaises(zygo.NotFound):
            self.sb.rollback("no-such-checkpoint")

    def test_checkpoint_fork_rollback_kill(self):
        with self.c.sandboxes.create(memory_mib=256) as sb:
            sb.files.write("/tmp/state", "before")
            sb.run_code("token = 'kept'")
            g0 = sb.generation()
            cp = sb.checkpoint("pybase")
            self.assertEqual(cp["tag"], "pybase")
            self.assertEqual(cp["sandbox_id"], sb.id)
            self.assertIn(cp["id"], [c["id"] for c in sb.checkpoints()])
            self.assertIn(cp["id"], [c["id"] for c in self.c.checkpoints.list(sandbox=sb.id)])

            sb.files.write("/tmp/state", "after")
            with sb.fork(2, cp, names=["py-kid-a", "py-kid-b"]) as fork:
                self.assertEqual(fork.checkpoint["id"], cp["id"])
                kids = fork.sandboxes
                self.assertEqual(len(kids), 2, [c.error for c in fork.children])
                self.assertEqual([k.record["name"] for k in kids], ["py-kid-a", "py-kid-b"])
                self.assertEqual(self.c.sandboxes.get("py-kid-b").id, kids[1].id)
                gens = {k.generation() for k in kids}
                self.assertEqual(len(gens | {g0}), 3, "children share a generation")
                for k in kids:
                    self.assertEqual(k.files.read("/tmp/state"), b"before")
                    self.assertEqual(k.run_code("token").value, "'kept'")
                    self.assertEqual(k.record["parent_id"], sb.id)
            for k in kids:  # the with block killed them
                with self.assertRaises(zygo.NotFound):
                    self.c.sandboxes.get(k.id)

            sb.rollback("pybase")
            self.assertEqual(sb.files.read("/tmp/state"), b"before")
            g1 = sb.generation()
            self.assertNotEqual(g1, g0)
            self.assertEqual(sb.record["generation"], g1)
            sid = sb.id
        with self.assertRaises(zygo.NotFound):  # the with block killed it
            self.c.sandboxes.get(sid)
        with self.assertRaises(zygo.NotFound):
            sb.kill()


if __name__ == "__main__":
    unittest.main()
