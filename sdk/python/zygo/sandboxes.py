"""Sandboxes: long-lived gVisor sandboxes that can be checkpointed, forked N ways and rolled
back, each copy resealed (new generation, hostname, machine id) before it is handed out."""

from __future__ import annotations

import base64
import dataclasses
import json
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

from . import errors
from ._http import Response, Transport, paginate

#: The daemon's default bound on a fork's n (a larger n raises BadRequest stating the bound).
MAX_FORK_N = 16

Stdin = Union[None, bytes, str, Iterable[bytes]]


def _sb_path(sandbox_id: str, *rest: str) -> str:
    return "/".join(("/v1/sandboxes", urllib.parse.quote(sandbox_id, safe="")) + rest)


def _checkpoint_ref(cp: Union[str, Dict[str, Any]]) -> str:
    return cp["id"] if isinstance(cp, dict) else cp


@dataclasses.dataclass
class Output:
    """One chunk of a command's output: ``stream`` is "stdout" or "stderr", ``data`` bytes."""
    stream: str
    data: bytes


@dataclasses.dataclass
class ExecResult:
    """How a command ended and what it printed: ``exit_code`` (128+N when killed by signal
    N; 127 for a missing program, 126 for one that cannot run), ``signal`` (or 0),
    ``timed_out``, ``stdout`` and ``stderr`` (bytes)."""
    exit_code: int
    signal: int
    timed_out: bool
    stdout: bytes
    stderr: bytes


@dataclasses.dataclass
class CodeResult:
    """The outcome of run_code. A Python exception is ``ok`` False with its traceback in
    ``error`` (the interpreter and its variables survive it). ``value`` is the repr of the
    last statement when it is an expression; ``stdout``/``stderr`` what the code printed
    (str); ``output_truncated``: it printed over 16 MiB; ``restarted``: the interpreter died
    under the call and its variables are lost."""
    ok: bool
    value: Optional[str]
    error: Optional[str]
    stdout: str
    stderr: str
    output_truncated: bool
    restarted: bool


class ExecStream:
    """A running command's output as it comes: iterate it for Output chunks; once the
    iteration ends, ``exit_code``, ``signal`` and ``timed_out`` hold how it ended. An error
    after the command started (the sandbox died) raises from the iteration. Closing it
    (or leaving its ``with`` block) before the end kills the command."""

    def __init__(self, resp: Response):
        self._resp = resp
        self._events = resp.lines()
        self.exit_code: Optional[int] = None
        self.signal = 0
        self.timed_out = False

    def __iter__(self) -> Iterator[Output]:
        try:
            for ev in self._events:
                if ev.get("error"):
                    raise errors.from_body(errors.status_of(ev["error"].get("code", "")), ev["error"])
                if ev.get("exit") is not None:
                    ex = ev["exit"]
                    self.exit_code, self.signal = ex.get("code", 0), ex.get("signal", 0)
                    self.timed_out = bool(ex.get("timed_out"))
                    return
                if ev.get("stream"):
                    yield Output(ev["stream"], base64.b64decode(ev.get("data") or ""))
            if self.exit_code is None:
                raise errors.ZygoError("the exec answer ended without an exit status", code="internal")
        finally:
            self.close()

    def wait(self) -> int:
        """Reads (and drops) the rest of the output; returns the exit code."""
        for _ in self:
            pass
        return int(self.exit_code or 0)

    def close(self) -> None:
        self._resp.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Files:
    """``sandbox.files``: files inside the sandbox, by absolute path."""

    def __init__(self, sb: "Sandbox"):
        self._sb = sb

    def write(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        """Writes data (str is UTF-8) to path with permission bits mode, creating parent
        directories; the file appears whole or not at all (at most 256 MiB: TooLarge)."""
        if isinstance(data, str):
            data = data.encode()
        q = urllib.parse.urlencode({"path": path, "mode": format(mode & 0o7777, "o")})
        self._sb._t.call("PUT", _sb_path(self._sb.id, "files") + "?" + q, body=bytes(data),
                         content_type="application/octet-stream")

    def read(self, path: str) -> bytes:
        """The file's content; NotFound when there is none."""
        q = urllib.parse.urlencode({"path": path})
        with self._sb._t.open("GET", _sb_path(self._sb.id, "files") + "?" + q) as resp:
            return resp.read()

    def list(self, path: str) -> List[Dict[str, Any]]:
        """The directory's entries in name order, each {"name", "size", "mode", "mod_time",
        "is_dir"}; at most 10000 (the daemon caps a listing)."""
        q = urllib.parse.urlencode({"path": path})
        return self._sb._t.call("GET", _sb_path(self._sb.id, "files", "list") + "?" + q) or []


class Sandbox:
    """A sandbox's record (``record``, a dict, as last read) and the handle to act on it.
    A context manager: leaving the ``with`` block kills the sandbox (its checkpoints stay)."""

    def __init__(self, t: Transport, record: Dict[str, Any]):
        self._t = t
        self.record = record
        self.files = Files(self)

    @property
    def id(self) -> str:
        return self.record["id"]

    @property
    def name(self) -> str:
        return self.record.get("name", "")

    def refresh(self) -> Dict[str, Any]:
        """Reads the record again and returns it."""
        self.record = self._t.call("GET", _sb_path(self.id))
        return self.record

    def _exec_body(self, argv: List[str], env: Optional[List[str]], cwd: Optional[str],
                   stdin: Stdin, timeout: Optional[float]) -> Dict[str, Any]:
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv: a list of strings, e.g. ['sh', '-c', command]")
        req: Dict[str, Any] = {"argv": list(argv)}
        if env:
            req["env"] = list(env)
        if cwd:
            req["cwd"] = cwd
        if timeout is not None:
            req["timeout_ms"] = int(timeout * 1000)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if isinstance(stdin, (bytes, bytearray)):
            req["stdin"] = base64.b64encode(stdin).decode()
        return req

    def exec_stream(self, argv: List[str], *, env: Optional[List[str]] = None, cwd: Optional[str] = None,
                    stdin: Stdin = None, timeout: Optional[float] = None) -> ExecStream:
        """Starts argv in the sandbox and returns its output as an iterator (ExecStream).
        env: ["KEY=VALUE"] added to the sandbox's; cwd: default /; timeout (seconds): then
        SIGTERM to its process group, SIGKILL 2 s later. stdin is bytes or str (sent whole,
        at most 16 MiB) or an iterable of bytes (a file opened "rb" too), streamed while the
        command runs, its end closing the command's stdin. A missing cwd raises NotFound."""
        req = self._exec_body(argv, env, cwd, stdin, timeout)
        if stdin is None or "stdin" in req:
            resp = self._t.open("POST", _sb_path(self.id, "exec"), json.dumps(req).encode(), "application/json")
        else:
            req["stdin_stream"] = True
            body = _prefixed(json.dumps(req).encode() + b"\n", stdin)  # type: ignore[arg-type]
            resp = self._t.open("POST", _sb_path(self.id, "exec"), body, "application/octet-stream")
        return ExecStream(resp)

    def exec(self, argv: List[str], *, env: Optional[List[str]] = None, cwd: Optional[str] = None,
             stdin: Stdin = None, timeout: Optional[float] = None) -> ExecResult:
        """Runs argv to its end (see exec_stream) and returns how it ended and its output."""
        out, err = bytearray(), bytearray()
        with self.exec_stream(argv, env=env, cwd=cwd, stdin=stdin, timeout=timeout) as proc:
            for chunk in proc:
                (out if chunk.stream == "stdout" else err).extend(chunk.data)
        return ExecResult(int(proc.exit_code or 0), proc.signal, proc.timed_out, bytes(out), bytes(err))

    def run_code(self, code: str, *, timeout: Optional[float] = None) -> CodeResult:
        """Runs Python source in the sandbox's persistent interpreter: variables survive
        between calls and are carried into forks. timeout (seconds): then KeyboardInterrupt."""
        req: Dict[str, Any] = {"code": code}
        if timeout is not None:
            req["timeout_ms"] = int(timeout * 1000)
        out, err = bytearray(), bytearray()
        with self._t.open("POST", _sb_path(self.id, "run-code"), json.dumps(req).encode(), "application/json") as resp:
            for ev in resp.lines():
                if ev.get("error"):
                    raise errors.from_body(errors.status_of(ev["error"].get("code", "")), ev["error"])
                if ev.get("result") is not None:
                    r = ev["result"]
                    return CodeResult(bool(r.get("ok")), r.get("value"), r.get("error"),
                                      out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                                      bool(r.get("output_truncated")), bool(r.get("restarted")))
                if ev.get("stream"):
                    (out if ev["stream"] == "stdout" else err).extend(base64.b64decode(ev.get("data") or ""))
        raise errors.ZygoError("the run-code answer ended without a result", code="internal")

    def checkpoint(self, tag: Optional[str] = None) -> Dict[str, Any]:
        """Saves an immutable image of the running sandbox, which keeps running; returns the
        checkpoint {"id", "tag", "sandbox_id", "generation", "size_bytes", ...}. A tag can
        stand for the id (the newest checkpoint with that tag)."""
        return self._t.call("POST", _sb_path(self.id, "checkpoint"), {"tag": tag} if tag else {})

    def checkpoints(self, *, page_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """The checkpoints taken of this sandbox, oldest first."""
        return list(paginate(self._t, _sb_path(self.id, "checkpoints"), page_size))

    def fork(self, n: int, from_checkpoint: Union[None, str, Dict[str, Any]] = None,
             names: Optional[List[str]] = None) -> "ForkResult":
        """Makes n independent copies, restored in parallel from from_checkpoint (an id, a
        tag or a checkpoint dict), or from a fresh checkpoint when None. Each copy has its
        own id, name, generation, hostname and machine id; names, when given, names them
        (exactly n distinct names, names[i] for child i; a bad one is BadRequest naming
        names[i], one in use Conflict; nothing is made). Partial success is not an error
        (check ForkResult.children); a refused fork (bad n: BadRequest) or one whose every
        child failed raises (``err.answer`` then lists the children)."""
        req: Dict[str, Any] = {"n": n}
        if from_checkpoint is not None:
            req["from"] = _checkpoint_ref(from_checkpoint)
        if names is not None:
            req["names"] = list(names)
        ans = self._t.call("POST", _sb_path(self.id, "fork"), req)
        children = []
        for ch in ans.get("children") or []:
            err = ch.get("error")
            children.append(ForkChild(
                index=ch.get("index", len(children)),
                sandbox=Sandbox(self._t, ch["sandbox"]) if ch.get("sandbox") else None,
                error=errors.from_body(errors.status_of(err.get("code", "")), err) if err else None))
        return ForkResult(checkpoint=ans.get("checkpoint") or {}, children=children)

    def rollback(self, checkpoint: Union[str, Dict[str, Any]]) -> None:
        """Replaces the running copy with a restore of checkpoint (an id, a tag or a
        checkpoint dict): anything written since is gone; the id and name stay; the
        generation is new. On error the sandbox runs on as it was. Updates ``record``."""
        self.record = self._t.call("POST", _sb_path(self.id, "rollback"), {"to": _checkpoint_ref(checkpoint)})

    def generation(self) -> str:
        """The sandbox's generation now (32 hex digits; new on every fork and rollback)."""
        return self._t.call("GET", _sb_path(self.id, "generation"))["generation"]

    def kill(self) -> None:
        """Destroys the sandbox; its checkpoints stay."""
        self._t.call("DELETE", _sb_path(self.id))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.kill()
        except errors.NotFound:
            pass

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r})"


def _prefixed(head: bytes, rest: Iterable[Union[bytes, str]]) -> Iterator[bytes]:
    """Yields head, then what rest gives (read 64 KiB at a time from a file), str as UTF-8."""
    yield head
    chunks = _read_chunks(rest) if hasattr(rest, "read") else rest
    for chunk in chunks:
        yield chunk.encode() if isinstance(chunk, str) else chunk


def _read_chunks(f: Any) -> Iterator[Union[bytes, str]]:
    while True:
        chunk = f.read(64 << 10)
        if not chunk:
            return
        yield chunk


@dataclasses.dataclass
class ForkChild:
    """One child of a fork: ``sandbox`` when it runs, else ``error`` (the daemon destroyed it)."""
    index: int
    sandbox: Optional[Sandbox]
    error: Optional[errors.ZygoError]


@dataclasses.dataclass
class ForkResult:
    """A fork's children in order and the ``checkpoint`` (dict) they were restored from.
    A context manager: leaving the ``with`` block kills the children that run."""
    checkpoint: Dict[str, Any]
    children: List[ForkChild]

    @property
    def sandboxes(self) -> List[Sandbox]:
        """The children that run."""
        return [c.sandbox for c in self.children if c.sandbox is not None]

    def __enter__(self) -> "ForkResult":
        return self

    def __exit__(self, *exc: Any) -> None:
        for sb in self.sandboxes:
            sb.__exit__()


class Sandboxes:
    """``client.sandboxes``: create and find sandboxes."""

    def __init__(self, t: Transport):
        self._t = t

    def create(self, *, name: Optional[str] = None, rootfs_dir: Optional[str] = None,
               services: Optional[List[Dict[str, Any]]] = None, env: Optional[List[str]] = None,
               secrets: Optional[List[str]] = None, memory_mib: Optional[int] = None,
               pids: Optional[int] = None, cpus: Optional[float] = None,
               network: Optional[Dict[str, Any]] = None) -> Sandbox:
        """Starts a sandbox and returns it once its guest answers. Every option is optional:
        name (unique; default the id), rootfs_dir (a host directory used read-only as the
        root), services ([{"name", "argv", "on_fork", "restart", ...}]), env (["KEY=VALUE"]),
        secrets (names of the daemon's secrets, written to /run/secrets/NAME), memory_mib
        (64..the host's; default 2048), pids (>= 32; default 4096), cpus (cores, e.g. 1.5),
        network ({"mode": "egress" or "none", "allow": [CIDR], "deny": [CIDR]}). A bad value
        raises BadRequest naming the field."""
        opts = {"name": name, "rootfs_dir": rootfs_dir, "services": services, "env": env, "secrets": secrets,
                "memory_mib": memory_mib, "pids": pids, "cpus": cpus, "network": network}
        return Sandbox(self._t, self._t.call("POST", "/v1/sandboxes", {k: v for k, v in opts.items() if v is not None}))

    def get(self, id_or_name: str) -> Sandbox:
        """The sandbox with that id or name; NotFound when there is none."""
        return Sandbox(self._t, self._t.call("GET", _sb_path(id_or_name)))

    def list(self, *, page_size: Optional[int] = None) -> List[Sandbox]:
        """Every sandbox, oldest first, following the pages."""
        return [Sandbox(self._t, rec) for rec in paginate(self._t, "/v1/sandboxes", page_size)]


class Checkpoints:
    """``client.checkpoints``: every sandbox's checkpoints."""

    def __init__(self, t: Transport):
        self._t = t

    def list(self, *, sandbox: Optional[str] = None, page_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """Checkpoints, oldest first: every one, or those taken of the sandbox (id or name)."""
        return list(paginate(self._t, "/v1/checkpoints", page_size, {"sandbox": sandbox} if sandbox else None))

    def get(self, checkpoint: str) -> Dict[str, Any]:
        """The checkpoint with that id or tag."""
        return self._t.call("GET", "/v1/checkpoints/" + urllib.parse.quote(checkpoint, safe=""))

    def remove(self, checkpoint: Union[str, Dict[str, Any]]) -> None:
        """Deletes a checkpoint; FailedPrecondition while a sandbox was restored from it or
        another checkpoint descends from it."""
        self._t.call("DELETE", "/v1/checkpoints/" + urllib.parse.quote(_checkpoint_ref(checkpoint), safe=""))
