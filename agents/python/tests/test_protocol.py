"""The protocol rules of docs/protocol.md that can be tested at the agent level, driven through
the fake supervisor in harness.py against the real agent."""

import array
import json
import os
import socket
import time
import unittest

import harness

CHECK_NAMES = {"threads", "generators", "sockets", "uuid1", "numpy_global", "libcrypto",
               "asyncio_loop", "landlock", "native_random", "descriptors", "processes",
               "shared_memory"}


def check(ready, name):
    return next(c for c in ready["checks"] if c["name"] == name)


def zygote_sockets(pid):
    """Return the fds of process ``pid`` that are sockets."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                found.append(int(fd))
        except OSError:
            pass
    return sorted(found)


class AgentTest(unittest.TestCase):
    """Starts agents and makes sure they are gone after each test."""

    def start(self, fixture="basic", **kwargs):
        agent = harness.Agent(fixture, **kwargs)
        self.addCleanup(agent.close)
        ready = agent.start()
        if "numpy" in str(ready.get("error", {}).get("message")):
            self.fail("python3-numpy is needed by this fixture: apt-get install python3-numpy")
        self.assertEqual(ready["type"], "ready", ready)
        return agent, ready


class StartupTest(AgentTest):
    def test_ready_message(self):
        agent, ready = self.start()
        self.assertEqual(ready["pid"], agent.pid)
        self.assertTrue(ready["python"].startswith("3.11"), ready["python"])
        self.assertIn("OpenSSL", ready["openssl"])
        self.assertIs(ready["fork_safe"], True)
        self.assertEqual({c["name"] for c in ready["checks"]}, CHECK_NAMES)
        for c in ready["checks"]:
            self.assertIn(c["level"], ("info", "warn"), c)
            self.assertIsInstance(c["detail"], str)

    def test_import_error_with_traceback(self):
        agent = harness.Agent("import_error")
        self.addCleanup(agent.close)
        msg = agent.start()
        self.assertEqual(msg["type"], "import_error")
        self.assertEqual(msg["error"]["type"], "ModuleNotFoundError")
        self.assertIn("zygo_no_such_module", msg["error"]["message"])
        self.assertIn("import_error/main.py", msg["error"]["traceback"])
        self.assertIn("line 2", msg["error"]["traceback"])
        self.assertEqual(agent.wait_exit(), 1)
        self.assertEqual(agent.stdout, "before the failure\n")  # flushed, once

    def test_handler_spec_errors(self):
        for spec, kind in (("main:NOT_CALLABLE", "TypeError"), ("main:nope", "AttributeError"),
                           ("main", "ValueError"), ("nomodule:handler", "ModuleNotFoundError")):
            with self.subTest(spec=spec):
                agent = harness.Agent("basic", handler=spec)
                self.addCleanup(agent.close)
                msg = agent.start()
                self.assertEqual(msg["type"], "import_error")
                self.assertEqual(msg["error"]["type"], kind, msg)
                self.assertEqual(agent.wait_exit(), 1)

    def test_native_pools_limited_by_the_agent_itself(self):
        # Step 1: no *_NUM_THREADS from the harness; the agent sets them before the import.
        agent, ready = self.start("bh12_blas", thread_env=False)
        self.assertEqual(check(ready, "threads")["count"], 1, check(ready, "threads"))
        self.assertIs(ready["fork_safe"], True)


class RulesTest(AgentTest):
    def test_rule1_child_is_copy_of_zygote(self):
        agent, _ = self.start()
        values = [agent.invoke({"id": str(i)}).value for i in range(3)]
        self.assertEqual([v["counter"] for v in values], [1, 1, 1])
        self.assertEqual(len({v["pid"] for v in values}), 3)

    def test_rule2_zygote_never_runs_request(self):
        agent, ready = self.start()
        request = agent.fork({"id": "1"})
        self.assertEqual(request.answer["type"], "forked")
        request.hello()
        # The zygote closed its copy of the request socket: only fd 3 is left.
        self.assertEqual(zygote_sockets(agent.pid), [3])
        self.assertEqual(request.hello_msg["pid"], request.pid)
        self.assertEqual(request.host_pid, request.pid)  # no pid namespace here
        request.go()
        request.wait()
        value = request.value
        self.assertEqual(value["zygote_pid"], ready["pid"])
        self.assertNotEqual(value["pid"], ready["pid"])
        self.assertEqual(value["pid"], request.pid)

    def test_rule3_no_channel_to_supervisor(self):
        agent, _ = self.start()
        forger, bystander = agent.fork({"id": "f", "action": "forge"}), agent.fork({"id": "b"})
        for r in (forger, bystander):
            r.hello()
        forger.go()
        # The child closes its request socket before user code: we see end of stream.
        self.assertIsNone(harness.recv(forger.sock)[0])
        bystander.go()
        forger.wait()
        bystander.wait()
        for r in (forger, bystander):
            self.assertEqual(r.value["sockets"], [], r.value)
            self.assertEqual(r.value["dumpable"], 0)
            self.assertEqual(r.exited["code"], 0)
        with self.assertRaises(harness.HarnessError):  # no forged message ever arrives
            agent.expect(lambda m: True, timeout=0.5)
        self.assertEqual(agent.invoke({"id": "after"}).value["counter"], 1)

    def test_rule7_reseed_every_child(self):
        agent, ready = self.start("rule7_generators")
        values = [r.value for r in agent.invoke_many([{"id": str(i)} for i in range(5)])]
        for key in ("random", "numpy", "ssl", "uuid1", "tempname", "unseeded", "np_unseeded",
                    "hidden"):
            self.assertEqual(len({v[key] for v in values}), 5, key)
        for key in ("seeded", "np_seeded"):  # explicitly seeded: the owner's fixed stream
            self.assertEqual(len({v[key] for v in values}), 1, key)
        gens = {i["name"]: i for i in check(ready, "generators")["items"]}
        self.assertEqual(check(ready, "generators")["level"], "warn")
        self.assertEqual((gens["main.UNSEEDED"]["explicit_seed"], gens["main.UNSEEDED"]["reseeded"]),
                         (False, True))
        self.assertEqual((gens["main.SEEDED"]["explicit_seed"], gens["main.SEEDED"]["reseeded"]),
                         (True, False))
        self.assertEqual(gens["main.NP_UNSEEDED"]["reseeded"], True)
        self.assertEqual(gens["main.NP_SEEDED"]["explicit_seed"], True)
        self.assertEqual(gens["main.LEGACY"]["kind"], "numpy.random.RandomState")
        self.assertIn("cannot tell", check(ready, "generators")["detail"])
        self.assertEqual(gens["main.SYSTEM"]["kind"], "random.SystemRandom")
        self.assertGreaterEqual(check(ready, "generators")["others"], 1)  # _hidden
        self.assertEqual(check(ready, "numpy_global")["level"], "warn")
        self.assertEqual(check(ready, "uuid1")["level"], "warn")

    def test_rule8_private_tmpdir(self):
        agent, _ = self.start()
        requests = agent.invoke_many([{"id": "1"}, {"id": "2"}])
        for r in requests:
            tmp = os.path.join(r.dir, "tmp")
            self.assertEqual(r.value["tmpdir"], tmp)
            self.assertEqual(r.value["gettempdir"], tmp)
            self.assertEqual(os.path.dirname(r.value["mkstemp"]), tmp)

    def test_rule9_no_shared_kernel_objects(self):
        server = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(server.close)
        port = server.getsockname()[1]
        agent, ready = self.start("rule9_kernel_objects", env={"ZYGO_TEST_PORT": str(port)})
        conn, _ = server.accept()
        self.addCleanup(conn.close)
        sockets = check(ready, "sockets")
        self.assertEqual(sockets["level"], "warn")
        self.assertIn(f"127.0.0.1:{port}", [i["peer"] for i in sockets["items"]])
        self.assertEqual(check(ready, "asyncio_loop")["level"], "warn")
        # Three children told to hurry (forked for a waiting request: descriptors still
        # replaced before hello) and three pre-warmed ones.
        requests = (agent.invoke_many([{"id": str(i)} for i in range(3)], hurry=True)
                    + agent.invoke_many([{"id": str(i)} for i in range(3, 6)]))
        fds = requests[0].value["fds"]
        zygote_links = {n: os.readlink(f"/proc/{agent.pid}/fd/{fds[n]}") for n in ("tcp", "udp")}
        for r in requests:
            v = r.value
            for name in ("epoll", "eventfd", "timerfd", "signalfd", "inotify"):
                self.assertEqual(v["links"][name], "/dev/null", name)
            for name in ("tcp", "udp"):  # a socket, but not the zygote's
                self.assertTrue(v["links"][name].startswith("socket:"), v["links"])
                self.assertNotEqual(v["links"][name], zygote_links[name])
            self.assertTrue(v["tcp_family"] and v["udp_family"])
            self.assertIn(v["send_error"], ("EPIPE", "ENOTCONN"))
            self.assertEqual(v["recv_error"], "ENOTCONN")
            self.assertEqual(v["peer"], "ENOTCONN")
            self.assertTrue(v["policy_loop_is_new"])
        # The zygote's connection is intact and no child wrote on it.
        conn.settimeout(0.3)
        with self.assertRaises(socket.timeout):
            conn.recv(100)
        conn.sendall(b"still there")


class RequestTest(AgentTest):
    def test_handler_exception(self):
        agent, _ = self.start()
        r = agent.invoke({"id": "7", "action": "raise"})
        self.assertEqual(r.exited["code"], 0)
        error = r.result["error"]
        self.assertIs(r.result["ok"], False)
        self.assertEqual(error["type"], "ValueError")
        self.assertEqual(error["message"], "bad input: 7")
        self.assertIn("basic/main.py", error["traceback"])
        self.assertNotIn("zygo_agent", error["traceback"])

    def test_child_times_its_steps(self):
        """result.json carries the child's own timing of each step after go, in order, for
        the supervisor's profile (docs/protocol.md "steps")."""
        agent, _ = self.start()
        r = agent.invoke({"id": "3"})
        self.assertEqual(r.value["counter"], 1)
        names = [name for name, _ in r.steps]
        for want in ("stdio", "fdreset", "reseed", "tmpdir", "event", "handler", "atexit+flush"):
            self.assertIn(want, names)
        self.assertLess(names.index("reseed"), names.index("handler"))
        self.assertTrue(all(isinstance(ns, int) and ns >= 0 for _, ns in r.steps), r.steps)

    def test_child_killed_by_signal(self):
        agent, _ = self.start()
        r = agent.invoke({"id": "1", "action": "kill"})
        self.assertEqual(r.exited["signal"], 9)
        self.assertNotIn("code", r.exited)
        self.assertIsNone(r.result)
        self.assertEqual(agent.invoke({"id": "2"}).value["counter"], 1)  # zygote unharmed

    def test_result_not_serialisable(self):
        agent, _ = self.start()
        for action, kind in (("set", "TypeError"), ("nan", "ValueError")):
            r = agent.invoke({"action": action})
            self.assertIs(r.result["ok"], False)
            self.assertEqual(r.result["error"]["type"], kind)
            self.assertIn("not JSON-serialisable", r.result["error"]["message"])

    def test_stdout_and_stderr_per_request(self):
        agent, _ = self.start()
        r = agent.invoke({"id": "9"})
        self.assertEqual(r.stdout, "handled 9\n")
        self.assertEqual(r.file("stderr"), "to stderr 9\n")
        self.assertEqual(os.stat(os.path.join(r.dir, "stdout")).st_mode & 0o777, 0o600)
        self.assertEqual(sorted(os.listdir(r.dir)),
                         ["event.json", "result.json", "stderr", "stdout", "tmp"])
        self.assertEqual(agent.stop(), 0)
        self.assertNotIn("handled", agent.stdout)

    def test_context(self):
        agent, _ = self.start()
        before = time.time()
        r = agent.invoke({"id": "1"}, deadline_ms=20000, function="stats", version="sha256:ab")
        ctx = r.value["context"]
        self.assertEqual(ctx["request_id"], r.request_id)
        self.assertEqual((ctx["function"], ctx["version"]), ("stats", "sha256:ab"))
        self.assertAlmostEqual(ctx["deadline"], before + 20, delta=5)
        self.assertTrue(0 < ctx["remaining_ms"] <= 20000, ctx)

    def test_child_waits_for_go(self):
        agent, _ = self.start()
        r = agent.fork({"id": "1"})
        r.hello()
        with self.assertRaises(harness.HarnessError):  # nothing happens without go
            agent.expect(lambda m: m["type"] == "exited", timeout=0.3)
        r.sock.close()  # the supervisor gives up: the child leaves without running anything
        self.assertEqual(r.wait()["code"], 2)
        self.assertIsNone(r.result)
        self.assertFalse(os.path.exists(os.path.join(r.dir, "stdout")))


class HurryTest(AgentTest):
    """``hurry`` queued on the request socket before the child exists (docs/protocol.md
    "Request protocol", step 3): the supervisor forked this child for a request that already
    waits, so the child makes its descriptors and shared memory its own and skips the rest of
    its pre-warm (reseed, rehearsal), which the steps after GO do; any other datagram found
    there is dropped, and the child pre-warms in full and serves. What hurried children are
    kept from sharing is checked by the rule 9 and shared-memory tests, which run them too."""

    def _serve(self, agent, before):
        r = agent.fork({"id": "h"}, before=before)
        r.hello()
        r.go()
        r.wait()
        self.assertEqual(r.exited["code"], 0)
        self.assertEqual(r.value["id"], "h")
        return [name for name, _ in r.steps]

    def test_hurried_child_skips_the_prewarm(self):
        agent, _ = self.start()
        steps = self._serve(agent, [harness.HURRY])
        # Descriptors and shared memory before hello (charged to the zygote's cgroup, once
        # per child); no reseed or rehearsal: go's steps do them.
        self.assertEqual([s for s in steps if s.startswith("pre.")], ["pre.fdreset", "pre.privatise"])
        for step in ("fdreset", "privatise", "reseed", "tmpdir", "dumpable", "event", "handler"):
            self.assertIn(step, steps)
        self.assertIn("pre.reseed", self._serve(agent, []))  # not hurried: pre-warmed
        self.assertEqual(agent.stop(), 0)

    def test_other_datagram_before_hello_is_dropped(self):
        agent, _ = self.start()
        go = json.dumps({"type": "go", "request_id": "r-x", "dir": "/nonexistent",
                         "deadline_ms": 1000}).encode()
        for before in ([b'{"type":"hurry","x":1}'], [go], [b"not json"]):
            with self.subTest(before=before):
                self.assertIn("pre.reseed", self._serve(agent, before))
        self.assertIn("ignoring a datagram before hello", agent.stderr)
        self.assertEqual(agent.stop(), 0)


class InlineEventTest(AgentTest):
    """A go message carrying its event after its JSON and a newline (docs/protocol.md
    "Request protocol", step 5): no event.json needed, the same decoding, and a go whose
    event_bytes disagrees with what follows is a malformed go (exit 2, nothing run)."""

    def _go(self, agent, raw, **kwargs):
        r = agent.fork({})
        r.hello()
        r.go_inline(raw, **kwargs)
        r.wait()
        return r

    def test_event_in_go(self):
        agent, _ = self.start()
        r = self._go(agent, b'{"id": "in\\ngo",\n "n": [1, 2]}\n')  # newlines in and out of strings
        self.assertEqual(r.exited["code"], 0)
        self.assertEqual(r.value["id"], "in\ngo")
        self.assertEqual(r.stdout, "handled in\ngo\n")
        self.assertNotIn("event.json", os.listdir(r.dir))
        self.assertIn("event", [name for name, _ in r.steps])

    def test_inline_event_the_parser_refuses_is_rejected(self):
        agent, _ = self.start()
        r = self._go(agent, b'{"id": ')
        self.assertEqual(r.exited["code"], 0)
        self.assertEqual(r.result["rejected"], "event")
        self.assertFalse(r.stdout)  # no user code ran

    def test_event_bytes_must_match(self):
        agent, _ = self.start()
        for raw, size in ((b'{"id": "1"}', 3), (b'{"id": "1"}', 99), (b"", 1), (b'{}', "2"),
                          (b'{}', True), (b'{}', 0)):
            with self.subTest(raw=raw, size=size):
                r = self._go(agent, raw, event_bytes=size)
                self.assertEqual(r.exited["code"], 2)
                self.assertIsNone(r.result)
                self.assertFalse(r.stdout)
        self.assertEqual(agent.invoke({"id": "after"}).value["id"], "after")  # zygote unharmed
        self.assertEqual(agent.stop(), 0)
        self.assertIn("invalid go: go: event_bytes", agent.stderr)

    def test_bytes_after_go_without_event_bytes_are_refused(self):
        agent, _ = self.start()
        r = agent.fork({"id": "file"})
        r.hello()
        r.sock.sendmsg([json.dumps({"type": "go", "request_id": r.request_id, "dir": r.dir,
                                    "deadline_ms": 30000}).encode() + b'\n{"id": "x"}'])
        self.assertEqual(r.wait()["code"], 2)
        self.assertFalse(r.stdout)


class ControlTest(AgentTest):
    def test_bytes_after_a_fork_message_are_refused(self):
        """Only go carries bytes after its JSON: a fork with a tail is a protocol error, not a
        fork (the loop in C takes only the exact form, and hands this one back)."""
        agent, _ = self.start()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(a.close)
        agent.control.sendmsg([b'{"type":"fork","seq":77}\nnot json \x00\xff'],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]).tobytes())])
        b.close()
        with self.assertRaises(harness.HarnessError):  # neither forked nor fork_error
            agent.expect(lambda m: m.get("seq") == 77, timeout=0.3)
        self.assertEqual(agent.invoke({"id": "1"}).value["counter"], 1)
        self.assertEqual(agent.stop(), 0)
        self.assertIn("bytes after the JSON of a 'fork' message", agent.stderr)

    def test_fork_error_without_descriptor(self):
        agent, _ = self.start()
        harness.send(agent.control, {"type": "fork", "seq": 99})
        msg = agent.expect(lambda m: m.get("seq") == 99)
        self.assertEqual(msg["type"], "fork_error")
        self.assertIn("one request socket", msg["error"])
        self.assertEqual(agent.invoke({"id": "1"}).value["counter"], 1)

    def test_unknown_and_garbage_messages_ignored(self):
        agent, _ = self.start()
        harness.send(agent.control, {"type": "bogus"})
        agent.control.send(b"not json")
        self.assertEqual(agent.invoke({"id": "1"}).value["counter"], 1)
        self.assertEqual(agent.stop(), 0)
        self.assertIn("unknown type 'bogus'", agent.stderr)
        self.assertIn("not UTF-8 JSON", agent.stderr)

    def test_stop_and_end_of_stream(self):
        agent, _ = self.start()
        self.assertEqual(agent.stop(), 0)
        agent, _ = self.start()
        agent.control.shutdown(socket.SHUT_RDWR)
        self.assertEqual(agent.wait_exit(), 0)

    def test_spawn_mode(self):
        agent, ready = self.start(mode="spawn")
        r = agent.run({"id": "s"})
        r.hello()
        self.assertEqual(r.host_pid, agent.pid)
        r.go()
        self.assertEqual(agent.wait_exit(), 0)
        self.assertEqual(r.value["pid"], ready["pid"])
        self.assertEqual(r.value["sockets"], [])  # control and request sockets closed
        self.assertEqual(r.value["tmpdir"], os.path.join(r.dir, "tmp"))
        self.assertEqual(r.stdout, "handled s\n")
        self.assertEqual(agent.stdout, "basic imported\n")
        self.assertEqual(json.loads(r.file("result.json"))["ok"], True)


class NamespaceTest(AgentTest):
    BWRAP = ["/usr/bin/bwrap", "--unshare-pid", "--unshare-user", "--uid", "1000", "--gid",
             "1000", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--bind", "/tmp", "/tmp", "--die-with-parent", "--"]

    def test_pid_namespace_credentials(self):
        """In a pid namespace the zygote reports NSPIDs and the kernel translates the
        hello's SCM_CREDENTIALS into the supervisor's (host) pid."""
        if not os.path.exists(self.BWRAP[0]):
            self.fail("bwrap is needed: apt-get install bubblewrap")
        agent, ready = self.start(wrapper=self.BWRAP)
        self.assertEqual(ready["pid"], 2)  # bwrap is pid 1 of the namespace
        r = agent.fork({"id": "ns"})
        r.hello()
        self.assertEqual(r.hello_msg["pid"], r.pid)
        self.assertNotEqual(r.host_pid, r.pid)
        with open(f"/proc/{r.host_pid}/status") as f:  # alive: it is waiting for go
            nspid = next(line for line in f if line.startswith("NSpid:")).split()
        self.assertEqual(nspid[1:], [str(r.host_pid), str(r.pid)])
        r.go()
        r.wait()
        self.assertEqual(r.value["pid"], r.pid)
        self.assertEqual(agent.stop(), 0)


if __name__ == "__main__":
    unittest.main()
