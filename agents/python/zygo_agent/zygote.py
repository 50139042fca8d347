"""The zygote: one fork per request (protocol "One request, fork mode", steps 2 and 7), and
the spawn-mode wait for ``run``.

The fork loop polls two descriptors with ``poll(2)`` (which, unlike epoll, leaves no kernel
object for children to inherit): the control socket, and the read end of a pipe that
``signal.set_wakeup_fd`` writes to on ``SIGCHLD``. The zygote never reads a request socket:
it passes the received descriptor to the child and closes its own copy.

Its own diagnostics go through :mod:`agentlog` (one ``write(2)``, no lock), and nothing runs
in the child between ``fork()`` and :func:`child.serve_request` except closing the zygote's
descriptors and restoring ``SIGCHLD``.

Where the supervisor preloaded ``zygo_rand.so`` (fork mode), the loop runs in C
(``zygo_fork_loop``, agents/native/zygo_fork.c) on the same two descriptors: it forks the
fork requests it recognises and reaps every child, and hands the rest back here
(:meth:`Zygote._serve_native`). Between two forks the Python loop wrote about 110 pages, each a
copy-on-write fault while the newest child shares it; the C loop writes a few dozen (the
flush, the interpreter's fork hooks). ``ZYGO_NATIVE_LOOP=0`` keeps the loop in Python.
"""

import _signal
import ctypes
import os
import select
import signal
import socket
import sys
from typing import Callable, Dict, NoReturn, Optional

from . import libc, warmup, wire
from .child import EXIT_AGENT_ERROR
from .agentlog import log

ServeRequest = Callable[[int], NoReturn]

# The datagrams of the fork loop, formatted directly: the same bytes wire.encode makes of
# {"type":"forked","seq":S,"pid":P} and {"type":"exited","seq":S,"pid":P,"code"|"signal":N}
# (ints only). Right after a fork every page the zygote writes is a copy-on-write fault (its
# child shares them all), and the JSON encoder's objects were a good part of those pages.
_FORKED = b'{"type":"forked","seq":%d,"pid":%d}'
_EXITED_CODE = b'{"type":"exited","seq":%d,"pid":%d,"code":%d}'
_EXITED_SIGNAL = b'{"type":"exited","seq":%d,"pid":%d,"signal":%d}'
# A fork request as the supervisor sends it, {"type":"fork","seq":N}: recognised without the
# JSON decoder (see _fork_seq); any other datagram is decoded in full.
_FORK_HEAD = b'{"type":"fork","seq":'
_FORK_TAIL = b"}"
_SEQ_DIGITS = 18  # at most: below 2**63, and far below int()'s limit on digits


class _ControlClosed(Exception):
    """The supervisor's end of the control socket is gone."""


# The loop in C (agents/native/zygo_fork.c, in zygo_rand.so, which the supervisor preloads
# into a fork-mode zygote): its return codes and the state it shares with the agent.
_LOOP_CLOSED, _LOOP_FORK_REQUEST, _LOOP_FULL = -1, -2, -3
_MAX_FDS = 8


class _LoopState(ctypes.Structure):
    _fields_ = [("control", ctypes.c_int), ("wakeup", ctypes.c_int),
                ("flush", ctypes.py_object), ("buf", ctypes.c_void_p),
                ("bufsize", ctypes.c_size_t), ("len", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int), ("nfds", ctypes.c_int),
                ("fds", ctypes.c_int * _MAX_FDS), ("seq", ctypes.c_longlong)]


class _NativeLoop:
    """``zygo_fork_loop`` and its helpers, called with the GIL held (``ctypes.PyDLL``)."""

    def __init__(self, lib, control: int, wakeup: int):
        self.run, self.fork_one, self.track = lib.zygo_fork_loop, lib.zygo_fork_one, lib.zygo_track
        self.run.argtypes = [ctypes.POINTER(_LoopState)]
        self.fork_one.argtypes = [ctypes.POINTER(_LoopState), ctypes.c_longlong, ctypes.c_int]
        self.track.argtypes = [ctypes.c_int, ctypes.c_longlong]
        self.run.restype = self.fork_one.restype = self.track.restype = ctypes.c_int
        self.buf = ctypes.create_string_buffer(wire.MAX_DATAGRAM)
        self.state = _LoopState(control=control, wakeup=wakeup, flush=flush_stdio,
                                buf=ctypes.addressof(self.buf), bufsize=wire.MAX_DATAGRAM)
        self.ref = ctypes.byref(self.state)


def _native_loop(control: int, wakeup: int) -> Optional[_NativeLoop]:
    """The loop in C if this process has it (the preloaded zygo_rand.so) and
    ``ZYGO_NATIVE_LOOP`` is not ``0``, else None (the loop in Python serves)."""
    if os.environ.get("ZYGO_NATIVE_LOOP") == "0":
        return None
    try:
        return _NativeLoop(ctypes.PyDLL(None, use_errno=True), control, wakeup)
    except (OSError, AttributeError):
        return None


def flush_stdio() -> None:
    """Flush ``sys.stdout``, ``sys.stderr`` (and the original streams if replaced) and every
    C stdio stream, so no buffered byte is copied into a child (rule 6). Returns nothing;
    errors from a broken stream are ignored."""
    out, err, out0, err0 = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    _flush(out)
    if err is not out:
        _flush(err)
    if out0 is not out and out0 is not err:
        _flush(out0)
    if err0 is not out and err0 is not err and err0 is not out0:
        _flush(err0)
    libc.fflush_all()


def _flush(stream) -> None:
    if stream is None:
        return
    try:
        stream.flush()
    except Exception:  # noqa: BLE001 - a closed or broken stream must not stop a fork
        pass


def _fork_seq(data: bytearray) -> Optional[int]:
    """Return N if the datagram ``data`` is exactly ``{"type":"fork","seq":N}`` with N a JSON
    non-negative integer of at most ``_SEQ_DIGITS`` digits (what the supervisor sends), else
    None (the caller decodes it in full). For the bytes it accepts, the result is what
    ``json.loads`` gives: the same object, without the decoder's objects."""
    if not (data.startswith(_FORK_HEAD) and data.endswith(_FORK_TAIL)):
        return None
    digits = data[len(_FORK_HEAD):-1]
    if not (0 < len(digits) <= _SEQ_DIGITS and digits.isdigit()) \
            or (digits[0] == 0x30 and len(digits) > 1):  # JSON has no leading zeros
        return None
    return int(digits)


class Zygote:
    """The fork loop. ``control`` is the control socket (fd 3); ``serve_request(fd)`` runs
    one request in the child and never returns. The zygote owns both sockets and every
    descriptor it receives until it hands one to a child.

    What the loop does between two forks is kept small (a buffer received into, fork
    requests recognised without the JSON decoder, answers formatted directly, one read of
    the wake-up pipe): every page it writes then is a copy-on-write fault while the last
    child still shares it."""

    def __init__(self, control: socket.socket, serve_request: ServeRequest):
        self._control = control
        self._serve_request = serve_request
        self._children: Dict[int, object] = {}  # pid -> seq of the fork that made it
        self._wakeup_r = self._wakeup_w = -1
        self._receiver = wire.Receiver(control)
        self._sendmsg = control.sendmsg
        self._native: Optional[_NativeLoop] = None

    def serve(self) -> int:
        """Serve ``fork`` messages until ``stop`` or end of stream on the control socket.
        Returns the exit status for the agent (0)."""
        self._wakeup_r, self._wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, _ignore_signal)
        signal.set_wakeup_fd(self._wakeup_w, warn_on_full_buffer=False)
        self._native = _native_loop(self._control.fileno(), self._wakeup_r)
        poller = select.poll()
        poller.register(self._control.fileno(), select.POLLIN)
        poller.register(self._wakeup_r, select.POLLIN)
        wakeup_r = self._wakeup_r
        try:
            if self._native is not None:
                log("the fork loop runs in C (zygo_fork_loop, agents/native/zygo_fork.c)")
                return self._serve_native(self._native)
            while True:
                for fd, _ in poller.poll():
                    if fd == wakeup_r:
                        self._drain_wakeup()
                        self._reap()
                    elif not self._on_control():
                        return 0
        except _ControlClosed:
            log("control socket closed by the supervisor; exiting")
            return 0
        finally:
            signal.set_wakeup_fd(-1)

    def _serve_native(self, native: _NativeLoop) -> int:
        """The loop in C serves; what it hands back is done here as the Python loop does it:
        a datagram it did not take, a fork request that needs the full checks. The C loop
        reaps and reports every child (those forked here too: ``_fork`` tracks them)."""
        st = native.state
        while True:
            rc = native.run(native.ref)
            if rc > 0:
                self._become_child(rc)
            if rc == _LOOP_CLOSED:
                raise _ControlClosed() from OSError(ctypes.get_errno(), "control socket")
            fds = list(st.fds[:st.nfds])
            if rc in (_LOOP_FORK_REQUEST, _LOOP_FULL):
                self._fork(st.seq, fds)
            elif not self._on_datagram(ctypes.string_at(native.buf, st.len), fds, st.msg_flags):
                return 0

    def _on_control(self) -> bool:
        """Handle one control message; returns False when the zygote must stop."""
        try:
            data, fds, flags = self._receiver.receive()
        except OSError as exc:
            raise _ControlClosed() from exc
        if not flags & wire.TRUNCATED:
            seq = _fork_seq(data)
            if seq is not None:
                self._fork(seq, fds)
                return True
        return self._on_datagram(bytes(data), fds, flags)

    def _on_datagram(self, data: bytes, fds: list, flags: int) -> bool:
        """Handle a control datagram the fast path did not take; returns False on ``stop``."""
        try:
            msg = wire.parse(data, fds, flags)
        except wire.ProtocolError as exc:
            log(f"control socket: {exc}")
            return True
        if msg is None:
            raise _ControlClosed()
        if msg.type == "fork":
            self._fork(msg.body.get("seq"), msg.fds)
            return True
        wire.close_all(msg.fds)
        if msg.type == "stop":
            log("stop received; exiting")
            return False
        log(f"control socket: ignoring message of unknown type {msg.type!r}")
        return True

    def _fork(self, seq, fds) -> None:
        """Step 2 of the protocol: check, flush, fork, close our copy, answer."""
        problem = _fork_problem(seq, fds)
        if problem is None:
            flush_stdio()
            problem = warmup.thread_problem()  # right before the fork: nothing runs between
        if problem is not None:
            wire.close_all(fds)
            self._send({"type": "fork_error", "seq": seq, "error": problem})
            return
        native = self._native
        if native is not None:  # the C loop tracks the child and sends forked
            rc = native.fork_one(native.ref, seq, fds[0])
            if rc > 0:
                self._become_child(rc)
            if rc == 0:
                return
            if rc == _LOOP_CLOSED:
                raise _ControlClosed() from OSError(ctypes.get_errno(), "control socket")
            if rc == _LOOP_FULL:
                wire.close_all(fds)
                self._send({"type": "fork_error", "seq": seq,
                            "error": "fork: too many children alive"})
                return
            # _LOOP_FORK_REQUEST: an audit hook or the kernel refused; os.fork says why
        try:
            pid = os.fork()
        except OSError as exc:
            wire.close_all(fds)
            self._send({"type": "fork_error", "seq": seq, "error": f"fork: {exc}"})
            return
        if pid == 0:
            self._become_child(fds[0])
        os.close(fds[0])
        if native is not None:
            native.track(pid, seq)
        else:
            self._children[pid] = seq
        try:
            self._sendmsg([_FORKED % (seq, pid)])
        except OSError as exc:
            raise _ControlClosed() from exc

    def _become_child(self, request_fd: int) -> NoReturn:
        """In the child: drop the zygote's descriptors and signal set-up, then serve. The C
        functions are called directly (``socket.socket.close`` and ``signal.signal`` are
        Python wrappers, the latter converting handlers to enums): each Python object the
        child touches here is a copy-on-write fault."""
        try:
            os.close(self._control.detach())  # fd 3 first: the child must not reach the supervisor
            signal.set_wakeup_fd(-1)
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
            os.close(self._wakeup_r)
            os.close(self._wakeup_w)
            self._serve_request(request_fd)
        finally:
            os._exit(EXIT_AGENT_ERROR)

    def _reap(self) -> None:
        """Reap every exited child and report it (step 7)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            seq = self._children.pop(pid, None)
            if seq is None:
                log(f"reaped process {pid}, which no fork request made")
                continue
            if os.WIFSIGNALED(status):
                data = _EXITED_SIGNAL % (seq, pid, os.WTERMSIG(status))
            else:
                data = _EXITED_CODE % (seq, pid, os.WEXITSTATUS(status))
            try:
                self._sendmsg([data])
            except OSError as exc:
                raise _ControlClosed() from exc

    def _drain_wakeup(self) -> None:
        """Empty the wake-up pipe: one byte per signal delivered, far fewer than a read
        takes; what a read leaves (or a spurious wake-up) poll reports again."""
        try:
            os.read(self._wakeup_r, 4096)
        except BlockingIOError:
            pass

    def _send(self, msg: dict) -> None:
        try:
            wire.send(self._control, msg)
        except OSError as exc:
            raise _ControlClosed() from exc


def serve_spawn(control: socket.socket, serve_request: ServeRequest) -> int:
    """Spawn mode: wait for ``{"type":"run"}`` with the request socket attached, then close
    the control socket and serve that one request in this process (never returns then).

    Returns 0 on ``stop`` or end of stream before ``run``, 1 for a ``run`` without exactly
    one descriptor.
    """
    while True:
        try:
            msg = wire.recv(control)
        except wire.ProtocolError as exc:
            log(f"control socket: {exc}")
            continue
        except OSError as exc:
            log(f"control socket: {exc}; exiting")
            return 0
        if msg is None or msg.type == "stop":
            return 0
        if msg.type != "run":
            wire.close_all(msg.fds)
            log(f"control socket: ignoring message of unknown type {msg.type!r}")
            continue
        if len(msg.fds) != 1:
            wire.close_all(msg.fds)
            log(f"run carried {len(msg.fds)} descriptors, not 1; exiting")
            return 1
        control.close()  # as in a forked child, before anything else
        serve_request(msg.fds[0])


def _fork_problem(seq, fds) -> Optional[str]:
    if not isinstance(seq, int) or isinstance(seq, bool):
        return f"fork: seq must be an integer, got {seq!r}"
    if len(fds) != 1:
        return f"fork: expected exactly one request socket attached, got {len(fds)}"
    if not 0 <= seq < 1 << 63:  # the C loop and its table hold a signed 64-bit seq
        return f"fork: seq must be in 0..2**63-1, got {seq}"
    return None


def _ignore_signal(signum, frame) -> None:
    """SIGCHLD handler: the work is done by the poll loop, woken by the wakeup fd."""
