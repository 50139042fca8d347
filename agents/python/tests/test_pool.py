"""In-process tests of the pool loader (zygo_agent.pool): binding a go message to its script,
loading the entry from the script's directory, and the nested Landlock domain that confines a
pool request's filesystem changes to its own request directory."""

import errno
import os
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zygo_agent import libc, pool  # noqa: E402


def _in_child(fn) -> int:
    """Run fn() in a forked child (Landlock restricts the process for good) and return its
    exit status: fn's return value, 99 for an exception."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = fn()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class PoolLoaderTest(unittest.TestCase):
    def setUp(self):
        self.req = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.req, "script", "lib"))
        with open(os.path.join(self.req, "script", "job.py"), "w") as f:
            f.write("from lib.util import twice\ndef run(event, context):\n"
                    "    return {'v': twice(event), 'tenant': context.tenant, 'script': context.script}\n")
        with open(os.path.join(self.req, "script", "lib", "__init__.py"), "w"):
            pass
        with open(os.path.join(self.req, "script", "lib", "util.py"), "w") as f:
            f.write("def twice(x):\n    return 2 * x\n")

    def go(self, script, fds=()):
        return types.SimpleNamespace(body={"script": script}, fds=tuple(fds), dir=self.req)

    def test_bind_and_run_from_the_request_directory(self):
        handler = pool.handler.zygo_bind_request(self.go(
            {"tenant": "acme", "hash": "h1", "entry": "job:run", "mounted": False}))

        def run():
            ctx = types.SimpleNamespace()
            out = handler(21, ctx)
            return 0 if out == {"v": 42, "tenant": "acme", "script": "h1"} else 1
        self.assertEqual(_in_child(run), 0)

    def test_bind_refuses_a_malformed_script(self):
        for script in (None, {"entry": "nocolon", "mounted": False},
                       {"entry": "job:run", "mounted": True}):
            with self.assertRaises(pool.ScriptError):
                pool.handler.zygo_bind_request(self.go(script))

    def test_a_mounted_script_takes_its_descriptor(self):
        fd = os.open(os.path.join(self.req, "script"), os.O_RDONLY | os.O_DIRECTORY)
        handler = pool.handler.zygo_bind_request(self.go(
            {"tenant": "t", "hash": "h", "entry": "job:run", "mounted": True}, [fd]))

        def run():
            return 0 if handler(1, types.SimpleNamespace())["v"] == 2 else 1
        self.assertEqual(_in_child(run), 0)
        os.close(fd)

    def test_confine_allows_only_the_request_directory(self):
        if libc.landlock_abi() < 3:
            self.fail("this kernel's Landlock is older than ABI 3: pools need Linux 6.2 or later")
        outside = tempfile.mkdtemp()

        def probe():
            if not pool.confine(self.req):
                return 2
            with open(os.path.join(self.req, "ok"), "w") as f:  # inside: allowed
                f.write("x")
            with open("/dev/null", "w") as f:
                f.write("x")
            refused = 0
            for attempt in (lambda: open(os.path.join(outside, "f"), "w"),
                            lambda: os.mkdir(os.path.join(outside, "d")),
                            lambda: os.symlink("data", os.path.join(outside, "l")),
                            lambda: os.mkfifo(os.path.join(outside, "p"))):
                try:
                    attempt()
                except OSError as e:
                    refused += e.errno == errno.EACCES
            return 0 if refused == 4 else 1
        self.assertEqual(_in_child(probe), 0)
        self.assertEqual(os.listdir(outside), [])


if __name__ == "__main__":
    unittest.main()
