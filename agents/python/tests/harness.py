"""A fake supervisor: what the Go supervisor does, without bwrap.

It starts the real agent with the real bootstrap command line (``/usr/bin/python3 -I -c ...``),
the zygote end of an ``AF_UNIX SOCK_SEQPACKET`` pair as fd 3, stdin on ``/dev/null`` and
stdout/stderr on pipes; it plays the protocol on the control socket and on one request socket
per request, with a temporary directory standing in for ``/run/zygo/req/<token>``.

The wire code here is written independently of ``zygo_agent.wire`` on purpose: a bug there must
not be mirrored by the harness.
"""

import array
import json
import os
import select
import shutil
import socket
import struct
import tempfile
import threading
import time

AGENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PYTHON = "/usr/bin/python3"
BOOTSTRAP = (f"import sys; sys.path.insert(0, {AGENT_DIR!r}); "
             "from zygo_agent.__main__ import main; main()")
TIMEOUT = 15.0
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1"}
_UCRED = struct.Struct("iII")


# The supervisor's hurry datagram (docs/protocol.md, step 1).
HURRY = b'{"type":"hurry"}'


class HarnessError(AssertionError):
    """The agent did not do what the protocol says (timeout, wrong message, ...)."""


def send(sock, msg, fds=()):
    """Send one JSON datagram, with ``fds`` as SCM_RIGHTS."""
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    sock.sendmsg([json.dumps(msg).encode()], anc)


def recv(sock, timeout=TIMEOUT):
    """Return ``(message or None at EOF, fds, (pid, uid, gid) or None)``."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        raise HarnessError(f"no datagram within {timeout} s")
    data, anc, flags, _ = sock.recvmsg(65536, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(32))
    fds, creds = [], None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", payload[:len(payload) - len(payload) % 4]))
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            creds = _UCRED.unpack(payload[:_UCRED.size])
    if flags & socket.MSG_TRUNC:
        raise HarnessError("datagram truncated")
    return (json.loads(data) if data else None), fds, creds


class _Reader(threading.Thread):
    """Drains one pipe into memory so the agent never blocks on a full pipe."""

    def __init__(self, fd):
        super().__init__(daemon=True)
        self.fd, self.data = fd, bytearray()
        self.start()

    def run(self):
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.data += chunk
        os.close(self.fd)


class Agent:
    """One agent process (a zygote in fork mode, one request in spawn mode)."""

    def __init__(self, fixture, mode="fork", handler="main:handler", env=None,
                 thread_env=True, wrapper=()):
        """Start the agent for ``fixture``; ``wrapper`` is an optional command prefix (for
        example a ``bwrap`` invocation ending in ``--``) that must keep fd 3 open."""
        self.code = os.path.join(FIXTURES, fixture)
        self.control, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        environment = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if thread_env:
            environment.update(THREAD_ENV)
        environment.update(env or {})
        argv = list(wrapper) + [PYTHON, "-I", "-c", BOOTSTRAP, "--code", self.code,
                                "--handler", handler, "--mode", mode]
        actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2),
                   (os.POSIX_SPAWN_DUP2, zygote_end.fileno(), 3)]
        self.pid = os.posix_spawn(argv[0], argv, environment, file_actions=actions)
        zygote_end.close()
        os.close(out_w)
        os.close(err_w)
        self._out, self._err = _Reader(out_r), _Reader(err_r)
        self.pending = []
        self.returncode = None
        self._seq = 0
        self._dirs = []
        self._requests = []

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        """Return the first control message: ``ready`` or ``import_error``."""
        return self.expect(lambda m: m["type"] in ("ready", "import_error"))

    def stop(self, timeout=TIMEOUT):
        """Send ``stop`` and return the agent's exit status."""
        try:
            send(self.control, {"type": "stop"})
        except OSError:
            pass
        return self.wait_exit(timeout)

    def wait_exit(self, timeout=TIMEOUT):
        """Wait for the agent to exit; return its status (negative: killed by a signal)."""
        if self.returncode is None:
            pidfd = os.pidfd_open(self.pid)
            try:
                if not select.select([pidfd], [], [], timeout)[0]:
                    raise HarnessError(f"agent {self.pid} still running after {timeout} s")
            finally:
                os.close(pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            self._out.join(timeout)
            self._err.join(timeout)
        return self.returncode

    def close(self):
        """Kill the agent if still running and remove the request directories."""
        if self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
            self.wait_exit()
        self.control.close()
        for r in self._requests:
            r.sock.close()
            r.child_end.close()
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def stdout(self):
        return self._out.data.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self._err.data.decode("utf-8", "replace")

    # -- control socket --------------------------------------------------------------------
    def expect(self, predicate, timeout=TIMEOUT):
        """Return (and consume) the first control message matching ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            for msg in self.pending:
                if predicate(msg):
                    self.pending.remove(msg)
                    return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HarnessError(f"no matching control message; pending {self.pending}; "
                                   f"stderr: {self.stderr[-2000:]}")
            msg, fds, _ = recv(self.control, remaining)
            for fd in fds:
                os.close(fd)
            if msg is None:
                raise HarnessError(f"control socket closed; stderr: {self.stderr[-2000:]}")
            self.pending.append(msg)

    def fork(self, event=None, before=()):
        """Send ``fork`` with a fresh request socket; return a ``Request`` (forked or
        fork_error in ``request.answer``). ``before``: datagrams queued on the request
        socket before the zygote has it, as the supervisor queues ``hurry``."""
        self._seq += 1
        request = Request(self, self._seq, event)
        for datagram in before:
            request.sock.sendmsg([datagram])
        send(self.control, {"type": "fork", "seq": self._seq}, [request.child_end.fileno()])
        request.child_end.close()
        request.answer = self.expect(
            lambda m: m.get("seq") == request.seq and m["type"] in ("forked", "fork_error"))
        request.pid = request.answer.get("pid")
        return request

    def run(self, event=None):
        """Spawn mode: send ``run`` with the request socket; return the ``Request``."""
        request = Request(self, 1, event)
        send(self.control, {"type": "run", "seq": 1}, [request.child_end.fileno()])
        request.child_end.close()
        return request

    def invoke(self, event, hurry=False, **go):
        """Fork, hello, go, wait for ``exited``; return the finished ``Request``."""
        return self.invoke_many([event], hurry=hurry, **go)[0]

    def invoke_many(self, events, hurry=False, **go):
        """Run one child per event concurrently: all forked and greeted, then all sent
        ``go``, then all awaited. Returns the finished ``Request`` objects in order.
        ``hurry``: each child is told so before it exists, as the supervisor tells a child
        forked for a request that already waits (it skips most of its pre-warm)."""
        requests = [self.fork(event, before=[HURRY] if hurry else []) for event in events]
        for r in requests:
            if r.answer["type"] != "forked":
                raise HarnessError(f"fork failed: {r.answer}")
            r.hello()
        for r in requests:
            r.go(**go)
        for r in requests:
            r.wait()
        return requests

    def new_dir(self, event):
        d = tempfile.mkdtemp(prefix="zygo-req-")
        os.mkdir(os.path.join(d, "tmp"), 0o700)
        with open(os.path.join(d, "event.json"), "w") as f:
            json.dump(event, f)
        self._dirs.append(d)
        return d


class Request:
    """One request: its socket (supervisor end), directory, and what came back."""

    def __init__(self, agent, seq, event):
        self.agent, self.seq, self.event = agent, seq, event if event is not None else {}
        self.sock, self.child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.dir = agent.new_dir(self.event)
        self.request_id = f"r-{seq}-{os.urandom(4).hex()}"
        self.answer = self.pid = self.host_pid = self.hello_msg = self.exited = None
        agent._requests.append(self)

    def hello(self, timeout=TIMEOUT):
        """Receive ``hello``; record the pid the kernel put in SCM_CREDENTIALS."""
        msg, fds, creds = recv(self.sock, timeout)
        if msg is None or msg.get("type") != "hello" or creds is None or fds:
            raise HarnessError(f"bad hello {msg!r} creds={creds} fds={fds}")
        self.hello_msg, self.host_pid = msg, creds[0]
        return msg

    def go(self, deadline_ms=30000, function="fixture", version="sha256:test", **extra):
        send(self.sock, {"type": "go", "request_id": self.request_id, "dir": self.dir,
                         "deadline_ms": deadline_ms, "function": function,
                         "version": version, **extra})

    def go_inline(self, raw, event_bytes=None, deadline_ms=30000, function="fixture",
                  version="sha256:test"):
        """Send ``go`` with the event inline, as the supervisor does for a small one: the
        JSON (``event_bytes``, by default ``len(raw)``), a newline, then ``raw``; the
        directory's event.json is removed first, so the child can only have it from go."""
        os.remove(os.path.join(self.dir, "event.json"))
        head = {"type": "go", "request_id": self.request_id, "dir": self.dir,
                "deadline_ms": deadline_ms, "function": function, "version": version,
                "event_bytes": len(raw) if event_bytes is None else event_bytes}
        self.sock.sendmsg([json.dumps(head, separators=(",", ":")).encode() + b"\n" + raw])

    def wait(self, timeout=TIMEOUT):
        """Return the ``exited`` message for this request."""
        self.exited = self.agent.expect(
            lambda m: m["type"] == "exited" and m.get("seq") == self.seq, timeout)
        self.sock.close()
        return self.exited

    def file(self, name):
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    @property
    def result(self):
        """result.json without the child's timing ("steps", see :attr:`steps`)."""
        text = self.file("result.json")
        if text is None:
            return None
        result = json.loads(text)
        result.pop("steps", None)
        return result

    @property
    def steps(self):
        """The child's timing of its steps from result.json: [[name, ns], ...]."""
        text = self.file("result.json")
        return None if text is None else json.loads(text).get("steps")

    @property
    def value(self):
        result = self.result
        if not result or not result.get("ok"):
            raise HarnessError(f"request failed: {result}; stderr: {self.file('stderr')}")
        return result["value"]

    @property
    def stdout(self):
        return self.file("stdout") or ""
