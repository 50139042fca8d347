"""One request, from ``hello`` to ``os._exit`` (protocol steps 3 to 6).

:func:`serve_request` runs in a forked child (fork mode) or in the agent itself (spawn mode),
after the caller has closed the control socket. In order:

1. in fork mode the pre-warm (:func:`_prewarm`; only its descriptors and shared memory when
   the supervisor sent ``hurry``: a request already waits for this child); ``hello`` with
   explicit ``SCM_CREDENTIALS`` on the request socket, then wait for ``go``;
2. before user code (:func:`_prepare`): close the request socket; point fds 1 and 2 at
   ``dir/stdout`` and ``dir/stderr``; in fork mode, apply the warm-up plan to every inherited
   descriptor (rule 9, :mod:`fdreset`) and give the child a private copy of every shared
   writable mapping only inheritance reaches (:mod:`sharedmem`) — in spawn mode, the process
   that imported the code serves the request, and nothing its import made is replaced,
   closed or remapped; reseed (rule 7); set ``TMPDIR=dir/tmp`` and reset ``tempfile``; ``PR_SET_DUMPABLE 0``; in fork
   mode, enter a Landlock domain of the request's own (:func:`enter_own_domain`); clear the
   zygote's ``atexit`` handlers; under ``strict``, install ``dir/strict.bpf`` as a second
   seccomp filter; take the event from ``go`` (after its JSON and a newline) or, when ``go``
   did not carry it, read ``dir/event.json``, and decode it (a document this runtime's parser
   refuses — nesting deeper than the recursion limit, an integer over
   ``sys.get_int_max_str_digits()`` digits, text that is not UTF-8 JSON — is written as a
   result with ``"rejected": "event"``, the caller's error, and no user code runs);
3. ``handler(event, context)``; the request's own ``atexit`` handlers; flush;
   ``dir/result.json`` written atomically, last; ``os._exit``.

Exit status: ``EXIT_OK`` once ``result.json`` holds the handler's outcome (success or
exception) or the event's rejection; ``EXIT_NO_GO`` when the request socket closed or ``go`` was malformed (no
result); ``EXIT_AGENT_ERROR`` when a step before or after the handler failed (a
``ZygoAgentError`` result is written when the request directory allows it).
"""

import atexit
import inspect
import json
import os
import socket
import stat
import sys
import time
from typing import NoReturn, Optional, Sequence, Tuple

from . import errors, fdreset, libc, reseed, sharedmem, warmup, wire
from .agentlog import log

EXIT_OK = 0
EXIT_NO_GO = 2
EXIT_AGENT_ERROR = 3

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_graveyard = []  # the zygote's stdio objects: never flushed or finalised in a child

# The child's own timing of its steps after ``go`` (name, nanoseconds), sent in result.json
# as "steps" for the supervisor's profile of the request (docs/protocol.md); at most
# MAX_STEPS entries.
MAX_STEPS = 24
_steps = []
_lap_at = [0]


def _lap(name: str) -> None:
    """Record the time since the previous lap (or ``go``) as step ``name``."""
    now = time.perf_counter_ns()
    if len(_steps) < MAX_STEPS:
        _steps.append([name, now - _lap_at[0]])
    _lap_at[0] = now


class Context:
    """What a handler learns about its request (like AWS Lambda's context object).

    ``request_id`` is the public request id, ``function`` and ``version`` name the deployed
    function, ``deadline`` is the deadline in seconds since the epoch (float).
    """

    def __init__(self, request_id: str, function: str, version: str, deadline: float):
        self.request_id = request_id
        self.function = function
        self.version = version
        self.deadline = deadline

    def remaining_ms(self) -> int:
        """Return the milliseconds left before the deadline, never below 0."""
        return max(0, int((self.deadline - time.time()) * 1000))

    get_remaining_time_in_millis = remaining_ms

    def __repr__(self) -> str:
        return (f"Context(request_id={self.request_id!r}, function={self.function!r}, "
                f"version={self.version!r}, remaining_ms={self.remaining_ms()})")


class _Go:
    """The validated ``go`` message."""

    def __init__(self, body: dict, fds: Sequence[int] = (), payload: Optional[bytes] = None):
        self.body, self.fds = body, tuple(fds)  # fds: a pool's script mount (pool.py)
        self.dir = _field(body, "dir", str)
        if not self.dir.startswith("/"):  # os.path.isabs of a str
            raise wire.ProtocolError(f"go: dir {self.dir!r} is not absolute")
        self.strict = bool(body.get("strict"))
        # The event, when it came inline (after the JSON and a newline); None: dir/event.json.
        self.event = None
        size = body.get("event_bytes")
        if size is not None or payload is not None:
            if type(size) is not int or size < 1 or payload is None or len(payload) != size:
                raise wire.ProtocolError(
                    f"go: event_bytes {size!r} does not match the {len(payload or b'')} bytes after it")
            self.event = payload
        deadline_ms = _field(body, "deadline_ms", int)
        self.context = Context(_field(body, "request_id", str),
                               str(body.get("function") or ""),
                               str(body.get("version") or ""),
                               time.time() + deadline_ms / 1000.0)


class _EventRejected(Exception):
    """The event could not be decoded by this runtime's JSON parser."""


class _StepFailed(Exception):
    def __init__(self, step: str, exc: BaseException):
        self.step, self.exc = step, exc
        super().__init__(f"{step}: {type(exc).__name__}: {exc}")


def serve_request(fd: int, handler, forked: bool) -> NoReturn:
    """Serve the request whose socket is ``fd`` with ``handler`` and leave with ``os._exit``.
    ``forked`` (fork mode: this process is a child of the zygote) makes the child's inherited
    descriptors and shared memory its own and puts the request in a Landlock domain of its
    own before user code (:func:`enter_own_domain`); without it (spawn mode, the thread
    fallback) the import's objects are left as they are.

    Never returns and never raises; the exit status says how far it got (see module doc).
    """
    code = EXIT_AGENT_ERROR
    try:
        code = _serve(fd, handler, forked)
    except BaseException as exc:  # noqa: BLE001 - nothing may unwind into the zygote's code
        log(f"request failed in the agent: {type(exc).__name__}: {exc}")
    finally:
        os._exit(code)


# {"type":"hello","pid":PID} as wire.encode makes it, formatted directly.
_HELLO = b'{"type":"hello","pid":%d}'


def _serve(fd: int, handler, forked: bool) -> int:
    # The request socket is the supervisor's AF_UNIX SOCK_SEQPACKET pair (docs/protocol.md):
    # named here, the kernel is not asked (three system calls).
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, fd)
    sock.setblocking(True)  # a default timeout set at import must not apply here
    # Before hello: a child the supervisor hears from is ready for go at once. A child forked
    # for a request that is already waiting (the pool was empty) was sent hurry: it makes
    # its descriptors and shared memory its own (once per child, charged to the zygote's
    # cgroup, not the request's) and skips the rest of the pre-warm, which go repeats.
    if forked:
        _prewarm(sock.fileno(), handler, hurried=_hurried(sock))
    pid = os.getpid()
    wire.send_datagram_with_credentials(sock, _HELLO % pid, pid)
    go = _wait_for_go(sock)
    if go is None:
        return EXIT_NO_GO
    bind = getattr(handler, "zygo_bind_request", None)
    if bind is not None:  # a pool (pool.py): the request's script came with go
        handler = bind(go)
    else:
        wire.close_all(go.fds)
    _lap_at[0] = time.perf_counter_ns()
    try:
        event = _prepare(sock, go, forked, getattr(handler, "zygo_read_beneath", ()))
    except _StepFailed as failure:
        _write_result_quietly(go.dir, {"ok": False, "error": errors.error(
            "ZygoAgentError", str(failure))})
        _flush_stdio()
        return EXIT_AGENT_ERROR
    except _EventRejected as rejected:
        _flush_stdio()
        write_result(go.dir, rejected_event(rejected.__cause__))
        return EXIT_OK
    outcome = _invoke(handler, event, go.context)
    _lap("handler")
    # The request's own atexit handlers and the flush come first: writing
    # result.json is the last act before os._exit, so the supervisor may answer
    # the caller as soon as it appears, with the request's output complete.
    data = encode_result(outcome)
    _lap("encode")
    atexit._run_exitfuncs()
    _flush_stdio()
    _lap("atexit+flush")
    write_encoded_result(go.dir, with_steps(data, _steps))
    return EXIT_OK


# The supervisor's {"type":"hurry"} as it sends it (quickEncode's bytes, docs/protocol.md).
_HURRY = b'{"type":"hurry"}'


def _hurried(sock: socket.socket) -> bool:
    """Whether the supervisor sent ``hurry`` on the request socket before this child's
    ``hello``: the child was forked for a request that already waits, so it skips most of
    its pre-warm. The supervisor queues it before the socket reaches the zygote, so one read
    without waiting finds it; end of stream (the supervisor has gone) counts as hurry too.
    Anything else found there (nothing else may come before ``hello``) is logged and
    dropped; ``go`` is still awaited. Code of the function's that runs in the child before
    this (an ``os.register_at_fork`` hook) could read it first: the child then pre-warms in
    full, which costs time only. Never raises."""
    try:
        # 64 bytes tell hurry from anything else (a longer datagram is cut, and dropped).
        data = sock.recv(64, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError as exc:
        log(f"request socket before hello: {exc}")
        return False
    if data == _HURRY or not data:  # not data: the supervisor has gone; no pre-warm either
        return True
    log("request socket: ignoring a datagram before hello that is not hurry")
    return False


def _prewarm(request_fd: int, handler=None, hurried: bool = False) -> None:
    """Do, before GO, the work that does not depend on the request, so that a pre-forked
    child has paid its copy-on-write faults off the request path: replace inherited kernel
    objects (rule 9 needs nothing from the request) and make inherited shared memory private
    (each once per child: done here, they are charged to the zygote's cgroup, not to the
    request's ``memory_mib`` and ``cpu_ms``), then run the reseed hooks once. The reseed
    hooks run again after GO (rule 7): what user code sees is seeded after the request is
    known. Then (:func:`_rehearse`) the ruleset of the request's Landlock domain is made
    with the rules that do not depend on the request, and the steps after GO are rehearsed
    on what is not the request's; and a handler object's ``zygo_prewarm`` (a pool's) runs.
    ``hurried`` (:func:`_hurried`: a request already waits for this child) stops after the
    shared memory: the reseed, the rehearsal and ``zygo_prewarm`` are what GO's steps do
    again, and would only delay the ``hello`` the request waits for.
    Never raises: a failure here is retried, and reported, after GO."""
    _lap_at[0] = time.perf_counter_ns()
    try:
        fdreset.reset_inherited(keep=(request_fd, _domain_ahead[0]))
        _lap("pre.fdreset")
        _privatise_memory()
        _lap("pre.privatise")
        if hurried:
            return
        reseed.reseed_all(forked=True)
        _lap("pre.reseed")
        _rehearse()
        prewarm = getattr(handler, "zygo_prewarm", None)
        if prewarm is not None:
            prewarm()
        _lap("pre.rehearse")
    except Exception:  # noqa: BLE001 - the same steps run, and report, after GO
        pass


# The ruleset of the request's Landlock domain this child made before GO (-1: none): it
# holds every rule that does not depend on the request (:func:`domain_plan`).
_domain_ahead = [-1]
_FIXED_WRITABLE = ("/tmp", "/dev")  # writable_dirs without the request's own directory
# Where the supervisor makes every request directory, in the sandbox (internal/nsbox ReqDir,
# docs/protocol.md): the directories of every request of this zygote, in flight or made
# ahead for a pre-forked child, are side by side beneath it, and all of them belong to the
# sandbox's one uid. A request's domain grants nothing beneath it but its own directory.
REQUEST_ROOT = "/run/zygo/req"
# What a request's domain handles: reading files (open for reading or execution) and every
# change to the filesystem (open for writing, truncate, make, remove, rename, link:
# libc.LANDLOCK_CHANGE), each granted beneath given directories only. Listing a directory
# is not handled (a rule granting it on / would grant it beneath too, and `ls /` must work):
# what a directory holds is named as its mode allows.
_READ = libc.LANDLOCK_ACCESS_FS_EXECUTE | libc.LANDLOCK_ACCESS_FS_READ_FILE
_HANDLED = _READ | libc.LANDLOCK_CHANGE
_plan = [("", ())]  # (REQUEST_ROOT it was made for, rules): domain_plan's cache


def domain_plan() -> Tuple[Tuple[str, int, bool], ...]:
    """The rules of a request's Landlock domain that do not depend on the request, as
    ``(path, rights, directory)``: reading beneath everything but ``REQUEST_ROOT``, and
    changing the filesystem beneath ``/tmp`` and ``/dev`` (but ``REQUEST_ROOT``, were it
    beneath them).
    "Everything but" is :func:`_beside`: the entries of ``/`` and of each directory on the
    way down to ``REQUEST_ROOT``, but the one on the way. Worked out once (the zygote does
    it before its first fork: a sandbox's ``/`` is read-only, so it holds for every child)
    for the value ``REQUEST_ROOT`` has; when it is not a directory (the agent outside its
    sandbox) nothing is left out. Raises ``OSError`` when a directory on the way cannot be
    listed."""
    root, rules = _plan[0]
    if root != REQUEST_ROOT or not rules:
        rules = tuple((path, _READ, directory) for path, directory in _beside(REQUEST_ROOT, "/"))
        for top in _FIXED_WRITABLE:
            rules += tuple((path, libc.LANDLOCK_CHANGE, directory)
                           for path, directory in _beside(REQUEST_ROOT, top))
        _plan[0] = (REQUEST_ROOT, rules)
    return rules


def _beside(root: str, top: str) -> Tuple[Tuple[str, bool], ...]:
    """``(path, directory)`` of what covers everything beneath the directory ``top`` but
    ``root``: ``((top, True),)`` when ``root`` is not a directory beneath ``top``; else each
    entry of ``top`` and of every directory between it and ``root`` but the one on the way
    to ``root``, and ``()`` when ``root`` is ``top``. Symbolic links are left out (what they
    name is covered, or not, where it is). Raises ``OSError``."""
    rel = os.path.relpath(root, top)
    if rel == ".":
        return ()
    if rel == ".." or rel.startswith("../") or not os.path.isdir(root):
        return ((top, True),)
    out, cur = [], top
    for name in rel.split("/"):
        with os.scandir(cur) as entries:
            out += [(os.path.join(cur, e.name), e.is_dir(follow_symlinks=False))
                    for e in entries if e.name != name and not e.is_symlink()]
        cur = os.path.join(cur, name)
    return tuple(out)


def prepare_own_domain() -> None:
    """Before GO: make the ruleset :func:`enter_own_domain` enters, with the rules of
    :func:`domain_plan`. The ruleset is this child's own: one made by the zygote and shared
    by every child could be widened by one child (any code that runs before GO with its
    descriptor open) for every later one. Nothing is entered here; a kernel without scoped
    Landlock gets nothing. Raises ``OSError``."""
    if _domain_ahead[0] != -1 or libc.landlock_abi() < libc.LANDLOCK_SCOPED_ABI:
        return
    fd = libc.landlock_ruleset(_HANDLED, 0, REQUEST_SCOPES)
    try:
        for path, rights, directory in domain_plan():
            libc.landlock_allow(fd, path, rights if directory else rights & libc.LANDLOCK_FILE_RIGHTS,
                                directory=directory)
    except BaseException:
        os.close(fd)
        raise
    _domain_ahead[0] = fd


def _rehearse() -> None:
    """Run, before GO, what the steps after GO run, on what is not the request's: the
    ruleset of the request's domain (:func:`prepare_own_domain`), ``PR_SET_DUMPABLE 0`` (set
    already: inherited), the event's read and decode and the result's encode on a constant,
    a text stream over ``/dev/null`` as :func:`redirect_stdio` makes them, and an
    ``os.environ`` write of the values it holds. Each is done again, for real, after GO;
    this only pays the copy-on-write faults of their first use in this child."""
    prepare_own_domain()
    libc.set_dumpable(False)
    decode_event(b'{"n": 1, "s": "x", "l": [1.5, null, true]}')
    encode_result({"ok": True, "value": {"n": 1, "l": [1.5, None, True]}})
    fd = os.open(os.devnull, _FILE_FLAGS | os.O_APPEND, 0o600)
    try:
        stream = open(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                      closefd=False)
        stream.write("\n")
        stream.close()  # flushes; closefd=False leaves fd to the finally
    finally:
        os.close(fd)
    for name in ("TMPDIR", "HOME"):
        if name in os.environ:
            os.environ[name] = os.environ[name]


def _wait_for_go(sock: socket.socket):
    """Return the validated ``go``, or ``None`` if the socket closed or ``go`` is invalid.
    Unknown message types are logged and ignored."""
    while True:
        try:
            msg = wire.recv(sock)
        except wire.ProtocolError as exc:
            log(f"request socket: {exc}")
            continue
        if msg is None:
            return None
        if msg.type != "go":
            wire.close_all(msg.fds)
            log(f"request socket: ignoring message of unknown type {msg.type!r}")
            continue
        try:
            return _Go(msg.body, msg.fds, msg.payload)
        except wire.ProtocolError as exc:
            wire.close_all(msg.fds)
            log(f"request socket: invalid go: {exc}")
            return None


def _prepare(sock: socket.socket, go: _Go, forked: bool, readable: Sequence[str] = ()):
    """Everything between ``go`` and user code; returns the event. Raises ``_StepFailed``.
    ``readable``: directories outside the sandbox's tree the request's Landlock domain must
    let it read (a pool script's mount, ``/proc/self/fd/N``).

    In order: close the request socket; stdout and stderr; in fork mode rule 9 (descriptors,
    shared memory); reseed; ``TMPDIR``; non-dumpable; in fork mode the request's own Landlock
    domain, before anything the request can start; the zygote's ``atexit`` handlers; under
    ``strict``, last, the filter; then the event. One function, each step timed under its
    short name (``step``, the key of ``_STEP_NAMES``): in a child every function and object
    touched is a copy-on-write fault, and a closure or table entry per step was more of them."""
    step = "close_socket"
    try:
        os.close(sock.detach())
        _lap(step)
        step = "stdio"
        redirect_stdio(go.dir)
        _lap(step)
        if forked:  # rule 9; in spawn mode what the import made is this process's own
            step = "fdreset"
            fdreset.reset_inherited(keep=(_domain_ahead[0],))
            _lap(step)
            step = "privatise"
            _privatise_memory()
            _lap(step)
        step = "reseed"
        reseed.reseed_all(forked=forked)
        _lap(step)
        step = "tmpdir"
        set_tmpdir(_join(go.dir, "tmp"))
        _lap(step)
        step = "dumpable"
        libc.set_dumpable(False)
        _lap(step)
        if forked:  # before anything the request can start; one thread here (the fork's)
            step = "landlock"
            enter_own_domain(writable_dirs(go.dir), readable)
            _lap(step)
        step = "atexit_clear"
        atexit._clear()
        _lap(step)
        if go.strict:  # last, so nothing of ours runs under it before user code
            step = "strict"
            install_strict(go.dir)
            _lap(step)
        step = "event"
        data = go.event if go.event is not None else read_file(_join(go.dir, "event.json"))
    except Exception as exc:  # noqa: BLE001 - turned into a ZygoAgentError result
        raise _StepFailed(_STEP_NAMES[step], exc) from exc
    event = decode_event(data)
    _lap("event")
    return event


# What a failed step is called in the ZygoAgentError result.
_STEP_NAMES = {
    "close_socket": "closing the request socket",
    "stdio": "redirecting stdout and stderr",
    "fdreset": "resetting inherited descriptors",
    "privatise": "making inherited shared memory private",
    "reseed": "reseeding",
    "tmpdir": "setting TMPDIR",
    "dumpable": "keeping the process non-dumpable",
    "landlock": "entering the request's own Landlock domain",
    "atexit_clear": "clearing the zygote's atexit handlers",
    "strict": "installing the strict seccomp filter",
    "event": "reading the event",
}


def _join(directory: str, name: str) -> str:
    """``os.path.join(directory, name)`` for an absolute ``directory`` and a plain file
    ``name``, without posixpath's calls."""
    return directory + name if directory.endswith("/") else directory + "/" + name


_memory_private = False


def _privatise_memory() -> None:
    """:func:`sharedmem.privatise` once per child (the pre-warm may have done it)."""
    global _memory_private
    if not _memory_private:
        sharedmem.privatise()
        _memory_private = True


def read_file(path: str) -> bytes:
    """Return the whole content of the file at ``path``, read to its end with raw system calls
    (``open``, ``fstat``, ``read``, ``close`` for a regular file; Python's ``open().read()``
    made nine). Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        want = st.st_size + 1 if st.st_size > 0 else 65536
        chunks = []
        while True:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < want and stat.S_ISREG(st.st_mode):
                break  # a short read of a regular file is its end
        return b"".join(chunks)
    finally:
        os.close(fd)


def decode_event(data: bytes):
    """Return the event decoded from ``data``. Raises ``_EventRejected`` (its ``__cause__``
    the parser's error) for what this runtime cannot decode: invalid UTF-8 or JSON, nesting
    past the recursion limit, an integer longer than ``sys.get_int_max_str_digits()``."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise _EventRejected() from exc


def rejected_event(exc: BaseException) -> dict:
    """The result for an event the parser refused (``exc``): ``rejected`` names the field,
    the message carries the parser's reason, never a path or a traceback."""
    return {"ok": False, "rejected": "event", "error": errors.error(
        "EventRejected", f"event: Python's JSON parser refused it: {type(exc).__name__}: "
        f"{errors._safe_str(exc)}")}


def install_strict(directory: str) -> None:
    """Install the strict filter the supervisor wrote as ``directory/strict.bpf`` (no
    execve, no new processes; threads allowed). Raises ``OSError``/``ValueError``."""
    with open(_join(directory, "strict.bpf"), "rb") as f:
        program = f.read()
    libc.install_seccomp_filter(program)


REQUEST_SCOPES = libc.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | libc.LANDLOCK_SCOPE_SIGNAL


def writable_dirs(request_dir: str) -> Tuple[str, ...]:
    """The directories a request may open files for writing beneath: the sandbox's writable
    mounts, ``/tmp`` and ``/dev`` (``/dev/shm``, ``/dev/null``, ``/dev/pts``), and its own
    request directory (its ``tmp/`` is ``TMPDIR``), never the root of the request
    directories: another request's directory is beside it there."""
    return _FIXED_WRITABLE + (request_dir,)


def enter_own_domain(writable: Sequence[str], readable: Sequence[str] = ()) -> bool:
    """Put this process, and everything it will start or exec, in a new Landlock domain
    that scopes signals and abstract unix sockets (``REQUEST_SCOPES``) and handles reading
    and changing files (``_HANDLED``): a file is opened for reading or execution only
    beneath what :func:`domain_plan` grants (everything but ``REQUEST_ROOT``) or a
    directory of ``writable``; a file is opened for writing or
    truncated, and anything made, removed, renamed or linked, only beneath a directory of
    ``writable`` (:func:`writable_dirs`), ``/tmp`` and ``/dev`` as :func:`domain_plan`
    grants them. So a request can neither read nor change the directory of another request
    of this zygote (its event, output, ``TMPDIR``, ``result.json``: not even make an empty
    file or a FIFO there, or remove one), even knowing its name (a temporary path in
    ``/proc/net/unix`` or in a subprocess's command line gives it away); only list it (the
    names in it, as the directory's mode allows: listing is not handled). Nor can it write
    ``/proc/PID/oom_score_adj``, ``clear_refs``, ``sched`` and the like of what another
    request execs (dumpable again, of the same uid), nor its own. Network access is not
    handled.

    The kernel then refuses ptrace-class access (``/proc/PID/mem``) and signals (``EPERM``)
    from the request to any process outside its domain (the zygote, idle pre-forked
    children, other requests and what they exec), and connections to abstract unix sockets
    bound outside it, while the zygote, outside every request's domain, still reaches, signals
    and reaps them all. Must run while the process has one thread (a forked child does).

    The ruleset :func:`prepare_own_domain` made before GO is used (and closed); it is made
    here when it was not. Only the rules of ``writable``'s other directories are added, and
    reading beneath each directory of ``readable`` (one outside the sandbox's tree, such as
    a pool script's detached mount, ``/proc/self/fd/N``).

    Returns True once in the domain, False when the kernel's Landlock is absent or older than
    ABI 6 (the request then carries on unscoped; the zygote's ``landlock`` warm-up check has
    said so). Raises ``OSError`` when Landlock with scoping is there but refuses, and
    ``RuntimeError`` when another thread is alive (one started by an at-fork hook would stay
    outside the domain).
    """
    if libc.landlock_abi() < libc.LANDLOCK_SCOPED_ABI:
        return False
    if not warmup.one_thread():
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"{threads} threads alive: Landlock would restrict only this one")
    prepare_own_domain()
    ruleset, _domain_ahead[0] = _domain_ahead[0], -1
    try:
        for path in writable:
            if path not in _FIXED_WRITABLE:
                libc.landlock_allow(ruleset, path, _HANDLED)
        for path in readable:
            libc.landlock_allow(ruleset, path, _READ)
        libc.landlock_restrict(ruleset)
    finally:
        os.close(ruleset)
    return True


def redirect_stdio(directory: str) -> None:
    """Point fds 1 and 2 at ``directory/stdout`` and ``directory/stderr`` (append, 0600) and
    rebuild ``sys.stdout``/``sys.stderr`` as line-buffered UTF-8 text over them.

    The inherited stdio objects are kept unflushed (whatever they held was flushed by the
    zygote before the fork). Returns nothing; raises ``OSError``.
    """
    for name, target in (("stdout", 1), ("stderr", 2)):
        fd = os.open(_join(directory, name), _FILE_FLAGS | os.O_APPEND, 0o600)
        try:
            os.dup2(fd, target)
        finally:
            os.close(fd)
    _graveyard.extend([sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__])
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="backslashreplace",
                                       buffering=1, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",
                                       buffering=1, closefd=False)


def set_tmpdir(path: str) -> None:
    """Make ``path`` (created 0700 if missing) the process's ``TMPDIR`` and ``HOME``, and
    reset ``tempfile``. ``HOME`` too: the sandbox's ``/tmp`` (the zygote's ``HOME``) is one
    folder for every request of the function, and what programs read from ``HOME`` (a
    ``python3`` the request runs loads ``~/.local/lib/pythonX.Y/site-packages/*.pth``; git,
    pip and npm read their dotfiles) would let one request plant code or settings in
    another's subprocesses. Returns nothing; raises ``OSError``."""
    try:  # the supervisor made it: one stat, not makedirs' three calls
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        is_dir = False
    if not is_dir:
        os.makedirs(path, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = path
    os.environ["HOME"] = path
    reseed.reset_tempfile()


def _invoke(handler, event, context: Context) -> dict:
    try:
        value = handler(event, context)
        if inspect.iscoroutine(value):  # an ``async def`` handler
            import asyncio
            value = asyncio.run(value)
        return {"ok": True, "value": value}
    except BaseException as exc:  # noqa: BLE001 - SystemExit included: it is the request's
        return {"ok": False, "error": errors.describe(exc, skip_frames=1)}


# json.dumps(outcome, allow_nan=False) made a new encoder for each call.
_RESULT_ENCODER = json.JSONEncoder(allow_nan=False)


def encode_result(outcome: dict) -> bytes:
    """Return ``outcome`` as JSON bytes. A value that is not JSON (a set, NaN, an object)
    becomes an error result naming the problem. Never raises."""
    try:
        return _RESULT_ENCODER.encode(outcome).encode("ascii")
    except Exception as exc:  # noqa: BLE001 - any failure of the user's value
        error = errors.error(type(exc).__name__,
                             f"handler result is not JSON-serialisable: {exc}")
        return json.dumps({"ok": False, "error": error}).encode("ascii")


def with_steps(data: bytes, steps: list) -> bytes:
    """Return the encoded result object ``data`` with ``"steps": steps`` added (the child's
    timing, for the supervisor's profile). ``data`` is always a JSON object
    (:func:`encode_result`), so the member goes before its closing brace."""
    return data[:-1] + b', "steps": ' + json.dumps(steps).encode("ascii") + b"}"


def write_result(directory: str, outcome: dict) -> None:
    """Write ``directory/result.json`` atomically (a temporary name, then rename).
    Returns nothing; raises ``OSError``."""
    write_encoded_result(directory, encode_result(outcome))


def write_encoded_result(directory: str, data: bytes) -> None:
    """Write already-encoded ``data`` as ``directory/result.json`` atomically (a temporary
    name, then rename). Returns nothing; raises ``OSError``."""
    tmp = _join(directory, ".result.json.tmp")
    fd = os.open(tmp, _FILE_FLAGS | os.O_TRUNC, 0o600)
    try:
        written = os.write(fd, data)
        if written < len(data):
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, _join(directory, "result.json"))


def _write_result_quietly(directory: str, outcome: dict) -> None:
    try:
        write_result(directory, outcome)
    except OSError as exc:
        log(f"could not write result.json: {exc}")


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the user may have replaced or closed them
            pass
    libc.fflush_all()


def _field(body: dict, name: str, kind: type):
    value = body.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise wire.ProtocolError(f"go: {name} must be a {kind.__name__}, got {value!r}")
    return value
