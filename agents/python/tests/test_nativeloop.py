"""The zygote's fork loop in C (agents/native/zygo_fork.c, built into zygo_rand.so), and the
Python loop's fast path: the protocol, rules and cases tests again, with the supervisor's
compact JSON (what the fast paths recognise) and the guard preloaded as the supervisor does.

The other test modules start the agent without the guard and send JSON with spaces: they
run the Python loop's full decoding path."""

import array
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import harness
import test_cases
import test_protocol

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
NATIVE = os.path.join(REPO, "agents", "native")
_guard = {}


def setUpModule():
    gcc = shutil.which("gcc")
    if gcc is None:
        raise AssertionError("gcc is needed to build the guard: apt-get install gcc")
    tmp = tempfile.mkdtemp(prefix="zygo-nativeloop-")
    out = os.path.join(tmp, "zygo_rand.so")
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", out,
                    os.path.join(NATIVE, "zygo_rand.c"), os.path.join(NATIVE, "zygo_fork.c"),
                    "-ldl"], check=True, capture_output=True)
    _guard.update(tmp=tmp, path=out)


def tearDownModule():
    shutil.rmtree(_guard["tmp"])


def compact_send(sock, msg, fds=()):
    """harness.send with the Go supervisor's separators: {"type":"fork","seq":1}."""
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    sock.sendmsg([json.dumps(msg, separators=(",", ":")).encode()], anc)


class CompactMixin:
    """Start agents with :meth:`env` added to their environment, and talk to them in compact
    JSON."""

    def setUp(self):
        super().setUp()
        plain = harness.send
        harness.send = compact_send
        self.addCleanup(setattr, harness, "send", plain)

    def start(self, fixture="basic", **kwargs):
        env = dict(kwargs.pop("env", None) or {})
        env.update(self.env())
        agent, ready = super().start(fixture, env=env, **kwargs)
        return agent, ready

    def env(self):
        return {}


class NativeMixin(CompactMixin):
    def env(self):
        return {"LD_PRELOAD": _guard["path"]}


class PythonFastPathMixin(CompactMixin):
    def env(self):
        return {"ZYGO_NATIVE_LOOP": "0", "LD_PRELOAD": _guard["path"]}


class NativeRulesTest(NativeMixin, test_protocol.RulesTest):
    pass


class NativeRequestTest(NativeMixin, test_protocol.RequestTest):
    pass


class NativeControlTest(NativeMixin, test_protocol.ControlTest):
    pass


class NativeCasesTest(NativeMixin, test_cases.CasesTest):
    pass


class PythonFastPathRulesTest(PythonFastPathMixin, test_protocol.RulesTest):
    pass


class PythonFastPathControlTest(PythonFastPathMixin, test_protocol.ControlTest):
    pass


class NativeLoopTest(NativeMixin, test_protocol.AgentTest):
    def test_the_loop_in_c_serves_and_says_so(self):
        agent, _ = self.start()
        self.assertEqual([r.value["counter"] for r in agent.invoke_many([{"id": "1"}] * 5)],
                         [1] * 5)
        self.assertEqual(agent.stop(), 0)
        self.assertIn("the fork loop runs in C", agent.stderr)

    def test_off_without_the_guard_or_when_turned_off(self):
        for env in ({"LD_PRELOAD": ""}, {"LD_PRELOAD": _guard["path"], "ZYGO_NATIVE_LOOP": "0"}):
            with self.subTest(env=env):
                agent = harness.Agent("basic", env=env)
                self.addCleanup(agent.close)
                self.assertEqual(agent.start()["type"], "ready")
                self.assertEqual(agent.invoke({"id": "1"}).value["counter"], 1)
                self.assertEqual(agent.stop(), 0)
                self.assertNotIn("the fork loop runs in C", agent.stderr)

    def test_forks_the_loop_hands_back_are_reported_too(self):
        """A fork request with spaces is decoded by the agent, forked by zygo_fork_one and
        tracked by the loop: its exited arrives like the others'."""
        agent, _ = self.start()
        r = harness.Request(agent, 77, {"id": "s"})
        sock = agent.control
        sock.sendmsg([b'{"type": "fork", "seq": 77}'],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                       array.array("i", [r.child_end.fileno()]).tobytes())])
        r.child_end.close()
        self.assertEqual(agent.expect(lambda m: m.get("seq") == 77)["type"], "forked")
        r.hello()
        r.go()
        self.assertEqual(r.wait()["code"], 0)
        self.assertEqual(r.value["counter"], 1)
        # Not what the fast path takes (a leading zero: not JSON; a negative seq): decoded
        # by the agent, which refuses the first and answers fork_error to the second.
        for data in ('{"type":"fork","seq":01}', '{"type":"fork","seq":-1}'):
            sock.send(data.encode())
        self.assertIn("one request socket",
                      agent.expect(lambda m: m.get("seq") == -1)["error"])
        self.assertEqual(agent.invoke({"id": "2"}).value["counter"], 1)
        self.assertEqual(agent.stop(), 0)
        self.assertIn("not UTF-8 JSON", agent.stderr)


if __name__ == "__main__":
    unittest.main()


class ReviewTest(NativeMixin, test_protocol.AgentTest):
    """What the review of the C loop found (docs/BENCHMARKS.md, eighth round)."""

    def test_a_request_socket_received_as_fd_0_is_still_the_childs(self):
        agent, ready = self.start("close_stdin")
        values = [agent.invoke({"id": str(i)}).value for i in range(4)]
        self.assertEqual(len({v["pid"] for v in values}), 4)
        self.assertTrue(all(ready["pid"] != v["pid"] for v in values))
        zygotes = [pid for pid in os.listdir("/proc") if pid.isdigit()
                   and _ppid(pid) == agent.pid and _has_socket_fd3(pid)]
        self.assertEqual(zygotes, [], "a child is serving the control socket")

    def test_one_child_cannot_widen_the_next_childs_domain(self):
        tmp = tempfile.mkdtemp(prefix="zygo-widen-", dir="/var/tmp")  # not beneath /tmp: writable to all
        self.addCleanup(shutil.rmtree, tmp, True)
        target = os.path.join(tmp, "target")
        os.mkdir(target)
        agent, _ = self.start("widen_ruleset", env={"WIDEN_MARK": os.path.join(tmp, "mark"),
                                                     "WIDEN_DIR": target})
        wrote = [agent.invoke({}).value["wrote"] for _ in range(3)]
        self.assertTrue(os.path.exists(os.path.join(tmp, "mark")))
        self.assertEqual(wrote[1:], [13, 13], wrote)  # EACCES: only the first child widened its own

    def test_a_seq_past_64_bits_is_refused_not_wrapped(self):
        agent, _ = self.start()
        r = harness.Request(agent, 2 ** 64 + 5, {"id": "big"})
        agent.control.sendmsg([b'{"type":"fork","seq":%d}' % r.seq],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                array.array("i", [r.child_end.fileno()]).tobytes())])
        r.child_end.close()
        answer = agent.expect(lambda m: m.get("seq") in (r.seq, 5))
        self.assertEqual((answer["type"], answer["seq"]), ("fork_error", r.seq), answer)
        self.assertIn("0..2**63-1", answer["error"])


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _has_socket_fd3(pid):
    try:
        return os.readlink(f"/proc/{pid}/fd/3").startswith("socket:")
    except OSError:
        return False
