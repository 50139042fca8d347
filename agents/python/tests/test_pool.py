"""In-process tests of the pool loader (zygo_agent.pool): binding a go message to its script,
loading the entry from the script's directory, and the nested Landlock domain that confines a
pool request's filesystem changes to its own request directory."""

import ctypes
import errno
import os
import socket
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
            pool.handler.zygo_prewarm()  # a ruleset for shared = true made ahead: not this one
            if not pool.confine(self.req):
                return 2
            if pool._ahead:
                return 3  # the unused ruleset made ahead was left open for the script
            with open(os.path.join(self.req, "ok"), "w") as f:  # inside: allowed
                f.write("x")
            with open("/dev/null", "w") as f:
                f.write("x")
            # a unix socket beneath its own directory: allowed outside a shared pool
            socket.socket(socket.AF_UNIX).bind(os.path.join(self.req, "own.sock"))
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

    def test_a_shared_request_reaches_no_other_request(self):
        """The tester's scenario: tenant A's request (here, the parent, outside the domain)
        listens on TCP and UDP loopback and an abstract unix socket; tenant B's shared-pool
        request can neither reach any of them nor bind its own (a pathname unix socket
        neither), and makes no IPC object."""
        if libc.landlock_abi() < pool.SHARED_ABI:
            self.fail(f"this kernel's Landlock is older than ABI {pool.SHARED_ABI}: shared "
                      "pools need Linux 6.12 or later")
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(1)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind(b"\0zygo-test-pool-%d" % os.getpid())
        abstract.listen(1)
        self.addCleanup(tcp.close)
        self.addCleanup(udp.close)
        self.addCleanup(abstract.close)
        pre = socket.socket()  # made before the filter: only Landlock stands in its way

        def probe(ahead):
            if ahead:  # the pre-forked child's preparation before GO made the ruleset
                pool.handler.zygo_prewarm()
            pool.confine(self.req, shared=True)
            if pool._ahead:
                return 2  # a ruleset made ahead was left open for the script
            pool.install_shared_filter()
            libc_ = ctypes.CDLL(None, use_errno=True)
            attempts = {
                "tcp connect": lambda: socket.create_connection(tcp.getsockname(), timeout=2),
                "tcp bind (socket made before)": lambda: pre.bind(("127.0.0.1", 0)),
                "tcp connect (socket made before)": lambda: pre.connect(tcp.getsockname()),
                "udp socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
                "tcp6 socket": lambda: socket.socket(socket.AF_INET6),
                "netlink socket": lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW),
                "abstract unix": lambda: socket.socket(socket.AF_UNIX).connect(
                    abstract.getsockname()),
                # a pathname socket can be connected to by whoever learns its path: none
                # is made, not even beneath the request's own directory
                "pathname unix bind (request dir)": lambda: socket.socket(socket.AF_UNIX).bind(
                    os.path.join(self.req, "s.sock")),
                "pathname unix bind (/tmp)": lambda: socket.socket(socket.AF_UNIX).bind(
                    os.path.join(tempfile.gettempdir(), "zygo-pool-%d.sock" % os.getpid())),
                "signal": lambda: os.kill(os.getppid(), 0),
                "msgget": lambda: _check(libc_.msgget(0, 0o1600)),
                "semget": lambda: _check(libc_.semget(0, 1, 0o1600)),
                "shmget": lambda: _check(libc_.shmget(0, 4096, 0o1600)),
                "mq_open": lambda: _check(libc_.mq_open(b"/zygo-test-pool", os.O_CREAT | os.O_RDWR,
                                                        0o600, None)),
            }
            reached = []
            for name, attempt in attempts.items():
                try:
                    attempt()
                    reached.append(name)
                except OSError as e:
                    if e.errno not in (errno.EACCES, errno.EPERM):
                        reached.append(f"{name}: {e}")
            # a unix socketpair and files beneath the request directory still work
            a, b = socket.socketpair()
            a.sendall(b"x")
            ok = b.recv(1) == b"x"
            if reached or not ok:
                print(reached, ok, file=sys.stderr)
                return 1
            return 0
        for ahead in (False, True):
            with self.subTest(ahead=ahead):
                self.assertEqual(_in_child(lambda: probe(ahead)), 0)
        pre.close()

    def test_shared_filter_needs_a_known_architecture(self):
        self.assertEqual(len(pool.shared_filter("x86_64")) % 8, 0)
        self.assertEqual(len(pool.shared_filter("aarch64")) % 8, 0)
        with self.assertRaises(pool.SharedPoolUnsupported) as cm:
            pool.shared_filter("riscv64")
        self.assertIn("isolation", str(cm.exception))

    def test_a_shared_script_is_the_default(self):
        seen = {}

        def fake_run(root, entry, request_dir, event, context, shared=True):
            seen["shared"] = shared
        real, pool.run_script = pool.run_script, fake_run
        self.addCleanup(setattr, pool, "run_script", real)
        for script, want in (({}, True), ({"shared": True}, True), ({"shared": False}, False)):
            body = {"tenant": "t", "hash": "h", "entry": "job:run", "mounted": False, **script}
            pool.handler.zygo_bind_request(self.go(body))(1, types.SimpleNamespace())
            self.assertIs(seen["shared"], want, script)


def _check(result: int) -> None:
    """Raise OSError for a libc call's -1."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


if __name__ == "__main__":
    unittest.main()
