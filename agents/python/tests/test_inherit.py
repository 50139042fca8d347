"""Issue 16: what a zygote hands its children. Every inherited descriptor has a policy
(files re-opened, pipes and sockets to peers replaced), shared writable memory is made
private, and in spawn mode nothing the import made is touched."""

import errno
import json
import os
import socket
import tempfile
import unittest

from test_protocol import AgentTest, check
from zygo_agent import fdreset, sharedmem


def events(n):
    return [{"id": str(i)} for i in range(n)]


def by_target(ready, suffix):
    return [i for i in check(ready, "descriptors")["items"] if i["target"].endswith(suffix)]


class InheritedDescriptorsTest(AgentTest):
    def test_file_opened_at_import_read_by_7_sequential_requests(self):
        agent, ready = self.start("inherited_fds")
        [item] = by_target(ready, "/records.txt")
        self.assertEqual((item["kind"], item["policy"]), ("file", "reopen"), item)
        self.assertIn("records.txt", check(ready, "descriptors")["detail"])
        records = [agent.invoke(e).value["record"] for e in events(7)]
        self.assertEqual(records, ["record 00"] * 7)

    def test_pipe_to_helper_8_concurrent_requests_get_a_clear_error(self):
        agent, ready = self.start("inherited_fds")
        pipes = [i for i in check(ready, "descriptors")["items"] if i["kind"] == "pipe"]
        self.assertEqual(sorted(i["policy"] for i in pipes), ["dead", "dead-writer"], pipes)
        [helper] = check(ready, "processes")["items"]
        self.assertEqual(sorted(helper["fds"]), sorted(i["fd"] for i in pipes))
        self.assertIn("-c import sys", helper["cmdline"])
        for r in agent.invoke_many(events(8)):
            v = r.value
            self.assertEqual(v["helper_pid"], helper["pid"])
            self.assertEqual((v["write_error"], v["read_error"], v["reply"]),
                             ("EPIPE", "EBADF", None), v)
        # The helper is intact: nothing a child did reached it.
        os.kill(helper["pid"], 0)

    def test_pty_to_helper_8_concurrent_requests_get_a_clear_error(self):
        """A pty is a channel like a pipe: both ends get the pipe policy, so no request
        reads another's reply (or a reply another request forged into the slave)."""
        agent, ready = self.start("inherited_pty")
        items = {i["target"]: i for i in check(ready, "descriptors")["items"]
                 if i["kind"] == "terminal"}
        self.assertEqual(sorted(t.rstrip("0123456789") for t in items),
                         ["/dev/ptmx", "/dev/pts/"], check(ready, "descriptors"))
        self.assertEqual({i["policy"] for i in items.values()}, {"dead"}, items)
        self.assertIn("/dev/ptmx: replaced by a dead descriptor",
                      check(ready, "descriptors")["detail"])
        for r in agent.invoke_many([{"id": f"caller-{i}", "wait": 1} for i in range(8)]):
            v = r.value
            self.assertEqual((v["write_error"], v["read_error"], v["slave_error"], v["got"]),
                             ("EBADF", "EBADF", "EBADF", ""), (r.event, v))

    def test_character_devices_other_than_mem_class_are_channels(self):
        cases = {(1, 3): ("device", "keep"), (1, 5): ("device", "keep"),
                 (1, 9): ("device", "keep"), (5, 0): ("terminal", "dead"),
                 (5, 1): ("terminal", "dead"), (5, 2): ("terminal", "dead"),
                 (136, 4): ("terminal", "dead"), (143, 0): ("terminal", "dead"),
                 (4, 64): ("terminal", "dead"), (10, 229): ("device", "dead")}
        for (major, minor), want in cases.items():
            e = fdreset._decide_char_device(9, "/dev/x", os.makedev(major, minor), os.O_RDWR)
            self.assertEqual((e.kind, e.action), want, (major, minor))
        writer = fdreset._decide_char_device(9, "/dev/pts/0", os.makedev(136, 0), os.O_WRONLY)
        self.assertEqual(writer.action, "dead-writer")

    def test_spawn_mode_leaves_the_import_alone(self):
        agent, ready = self.start("inherited_fds", mode="spawn")
        self.assertIn("left as they are", check(ready, "descriptors")["detail"])
        r = agent.run({"id": "s"})
        r.hello()
        r.go()
        self.assertEqual(agent.wait_exit(), 0)
        self.assertEqual(r.value["reply"], "reply for s")
        self.assertEqual(r.value["record"], "record 00")


class SharedMemoryTest(AgentTest):
    def test_map_shared_regions_are_private_in_each_child(self):
        agent, ready = self.start("shared_memory")
        items = check(ready, "shared_memory")["items"]
        backings = [i["backing"] for i in items if i["private"]]
        self.assertTrue(any(b == "/dev/zero (deleted)" for b in backings), items)
        self.assertTrue(any(b.startswith("/dev/shm/psm_") for b in backings), items)
        for hurry in (False, True):  # pre-warmed children, and children told to hurry
            with self.subTest(hurry=hurry):
                for r in [agent.invoke(e, hurry=hurry) for e in events(5)]:  # sequential
                    self.assertEqual(r.value, {"anon": "zygote", "value": 0, "shm": "zygote"})
                concurrent = agent.invoke_many([{"id": str(i), "wait": 0.3} for i in range(4)],
                                               hurry=hurry)
                for r in concurrent:  # concurrent: no sibling's write seen either
                    self.assertEqual(r.value["anon_after"], r.event["id"], r.value)


class GrpcFallbackTest(AgentTest):
    def test_grpc_channel_made_at_import_works_in_spawn_mode(self):
        try:
            import grpc  # noqa: F401
        except ImportError:
            self.fail("python3-grpcio is needed: apt-get install python3-grpcio "
                      "(scripts/deps.sh)")
        agent, ready = self.start("grpc_fallback")
        self.assertIs(ready["fork_safe"], False)  # gRPC's threads: the fallback
        agent.stop()
        agent, ready = self.start("grpc_fallback", mode="spawn")
        r = agent.run({"id": "7"})
        r.hello()
        r.go()
        self.assertEqual(agent.wait_exit(), 0)
        self.assertEqual(r.result, {"ok": True, "value": "echo:7"}, r.file("stderr"))


class PolicyTest(unittest.TestCase):
    """fdreset.decide and reset_inherited on each kind of descriptor, in a forked child."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="zygo-fds-")
        self.fds = {}

        def keep(name, fd):
            self.fds[name] = fd
            self.addCleanup(os.close, fd)

        path = os.path.join(self.dir, "data")
        with open(path, "wb") as f:
            f.write(b"0123456789")
        keep("file", os.open(path, os.O_RDONLY))
        os.lseek(self.fds["file"], 4, os.SEEK_SET)
        keep("append", os.open(path, os.O_WRONLY | os.O_APPEND))
        keep("deleted", os.open(os.path.join(self.dir, "gone"), os.O_RDWR | os.O_CREAT))
        os.unlink(os.path.join(self.dir, "gone"))
        keep("memfd", os.memfd_create("user"))
        keep("dir", os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY))
        keep("opath", os.open(path, os.O_PATH))
        keep("opath_memfd", os.open(f"/proc/self/fd/{self.fds['memfd']}", os.O_PATH))
        keep("devnull", os.open("/dev/null", os.O_RDWR))
        r, w = os.pipe()
        keep("pipe_r", r)
        keep("pipe_w", w)
        # O_PATH handles on the pipe's ends: re-opening /proc/self/fd/N would give each
        # request a live end of the same pipe (a third tester mixed replies that way).
        keep("opath_pipe_r", os.open(f"/proc/self/fd/{r}", os.O_PATH))
        keep("opath_pipe_w", os.open(f"/proc/self/fd/{w}", os.O_PATH))
        keep("opath_devnull", os.open("/dev/null", os.O_PATH))
        a, b = socket.socketpair()
        keep("sock", a.detach())
        b.close()
        server = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(server.close)
        keep("tcp", socket.create_connection(server.getsockname()).detach())

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_decide(self):
        plan = {e.fd: e for e in fdreset.plan_inherited()}
        want = {"file": ("file", "reopen", False), "append": ("file", "reopen", False),
                "deleted": ("file", "reopen", True), "memfd": ("file", "reopen", True),
                "dir": ("directory", "reopen", False), "opath": ("o_path", "keep", False),
                "opath_memfd": ("o_path", "keep", True), "opath_pipe_r": ("o_path", "dead", False),
                "opath_pipe_w": ("o_path", "dead", False), "opath_devnull": ("o_path", "keep", False),
                "devnull": ("device", "keep", False), "pipe_r": ("pipe", "dead", False),
                "pipe_w": ("pipe", "dead-writer", False),
                "sock": ("socket", "dead", False), "tcp": ("socket", "fresh-socket", False)}
        for name, (kind, action, shared) in want.items():
            e = plan[self.fds[name]]
            self.assertEqual((e.kind, e.action, e.shared_content), (kind, action, shared), name)
        self.assertEqual(plan[self.fds["file"]].offset, 4)

    def test_reset_in_a_child(self):
        fdreset.plan_inherited()
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: reset, then report what each descriptor does now
            try:
                fdreset._done = False
                fdreset.reset_inherited(keep=(report_w,))
                os.write(report_w, json.dumps(self._observe()).encode())
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                os.write(report_w, json.dumps({"error": repr(exc)}).encode())
            finally:
                os._exit(0)
        os.close(report_w)
        data = b""
        while chunk := os.read(report_r, 65536):
            data += chunk
        os.close(report_r)
        os.waitpid(pid, 0)
        seen = json.loads(data)
        self.assertNotIn("error", seen)
        self.assertEqual(seen["file_read"], "456")  # the planned offset, its own description
        self.assertEqual(os.lseek(self.fds["file"], 0, os.SEEK_CUR), 4)  # ours did not move
        self.assertTrue(seen["append_flags"] & os.O_APPEND)
        self.assertEqual(seen["pipe_r"], ["EBADF", "EBADF"])
        self.assertEqual(seen["pipe_w"], [None, "EPIPE"])
        self.assertEqual(seen["sock"], ["EBADF", "EBADF"])
        self.assertEqual(seen["tcp"], ["ENOTCONN", "EPIPE"])
        self.assertEqual(seen["dir"], sorted(os.listdir(self.dir)))
        with open(os.path.join(self.dir, "data"), "rb") as f:
            self.assertEqual(f.read(), b"0123456789+")  # the child's append

    def _observe(self):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(1)

        def errors(fd, sock=False):
            out = []
            calls = ((lambda: libc.recv(fd, buf, 1, 0), lambda: libc.send(fd, b"x", 1, 0))
                     if sock else (lambda: os.read(fd, 1), lambda: os.write(fd, b"x")))
            for call in calls:
                try:
                    if call() == -1:
                        raise OSError(ctypes.get_errno(), "")
                    out.append(None)
                except OSError as exc:
                    out.append(errno.errorcode[exc.errno])
            return out
        fds = self.fds
        os.write(fds["append"], b"+")
        return {"file_read": os.read(fds["file"], 3).decode(),
                "append_flags": fdreset.open_flags(fds["append"]),
                "pipe_r": errors(fds["pipe_r"]), "pipe_w": [None, errors(fds["pipe_w"])[1]],
                "sock": errors(fds["sock"], sock=True),
                "tcp": errors(fds["tcp"], sock=True),
                "dir": sorted(os.listdir(fds["dir"]))}


class SharedMemoryUnitTest(unittest.TestCase):
    def test_only_inherited(self):
        for backing in ("", "/dev/zero (deleted)", "/memfd:x (deleted)", "/SYSV00000000 (deleted)",
                        "/dev/shm/psm_1", "/dev/shm/pym-1-2 (deleted)"):
            self.assertTrue(sharedmem.only_inherited(backing), backing)
        self.assertFalse(sharedmem.only_inherited("/srv/data.bin"))


if __name__ == "__main__":
    unittest.main()
