"""Functions: deploy a directory, invoke, read logs, list, get, remove."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import stat
import tarfile
import time
import urllib.parse
from typing import Any, Dict, List, Optional

from ._http import Transport, paginate

#: The largest bundle (gzip'd tar) a deploy takes, bytes.
MAX_BUNDLE_BYTES = 64 << 20


def pack_dir(directory: str) -> bytes:
    """Returns the bundle a deploy uploads for the function directory (the one holding
    zygo.toml): a gzip'd tar of its regular files (mode 0755 when executable, else 0644) and
    directories, paths relative to it, directories named .git left out; as the Go SDK's
    PackDir writes it. A symbolic link, device, socket or pipe raises ValueError naming its
    path (a bundle must not point outside itself); so does a path that is not a directory."""
    if not os.path.isdir(directory):
        raise ValueError(f"packing {directory}: not a directory: a function is the directory holding zygo.toml")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tw:
        for root, dirs, files in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if d != ".git")
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, directory).replace(os.sep, "/")
                st = os.lstat(path)
                info = tarfile.TarInfo(rel)
                if stat.S_ISDIR(st.st_mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tw.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tw.addfile(info, f)
                else:
                    raise ValueError(f"packing {directory}: {rel}: not a regular file or directory "
                                     "(links are not allowed in a function)")
    return buf.getvalue()


@dataclasses.dataclass
class InvokeResult:
    """A successful invoke: ``value`` (the handler's JSON value, decoded), ``raw`` (bytes as
    answered), ``request_id`` (its log lines carry it), ``version`` (the function version
    that served it), ``child`` (preforked, forked, spawned or worker), ``elapsed`` (seconds,
    round trip as the client measured it), ``server_timing`` (the daemon's timed steps,
    [(name, milliseconds)] in order)."""
    value: Any
    raw: bytes
    request_id: str
    version: str
    child: str
    elapsed: float
    server_timing: List[tuple]


def _parse_server_timing(header: str) -> List[tuple]:
    out = []
    for part in header.split(","):
        name, _, rest = part.strip().partition(";")
        if not name:
            continue
        dur = 0.0
        for p in rest.split(";"):
            k, _, v = p.strip().partition("=")
            if k == "dur":
                try:
                    dur = float(v)
                except ValueError:
                    pass
        out.append((name, dur))
    return out


class Functions:
    """``client.functions``: the daemon's functions."""

    def __init__(self, t: Transport):
        self._t = t

    @staticmethod
    def _path(name: str, *rest: str) -> str:
        return "/".join(("/v1/functions", urllib.parse.quote(name, safe="")) + rest)

    def deploy(self, directory: str) -> Dict[str, Any]:
        """Packs the function directory (pack_dir) and deploys it; returns once the new
        version serves: {"name", "version", "unchanged", "mode", "ready_ms", "checks", ...}.
        A version that fails to import raises ImportFailed with its traceback (the previous
        one keeps serving); a bad zygo.toml raises BadRequest naming the key."""
        return self.deploy_bundle(pack_dir(directory))

    def deploy_bundle(self, bundle: bytes) -> Dict[str, Any]:
        """Deploys a bundle already packed (a gzip'd tar, at most MAX_BUNDLE_BYTES)."""
        return self._t.call("POST", "/v1/functions", body=bundle, content_type="application/gzip")

    def invoke(self, name: str, event: Any = None) -> InvokeResult:
        """Runs the function with event (any JSON value; None sends {}) and returns its
        result. A request that failed raises an InvokeError (HandlerError with the handler's
        type and traceback, InvokeTimeout, Crashed, ...) carrying its request_id; an unknown
        function raises NotFound."""
        payload = json.dumps({} if event is None else event).encode()
        t0 = time.monotonic()
        with self._t.open("POST", self._path(name, "invoke"), payload, "application/json") as resp:
            raw = resp.read().strip()
            h = resp.headers
        return InvokeResult(value=json.loads(raw) if raw else None, raw=raw,
                            request_id=h.get("x-zygo-request-id", ""), version=h.get("x-zygo-version", ""),
                            child=h.get("x-zygo-child", ""), elapsed=time.monotonic() - t0,
                            server_timing=_parse_server_timing(h.get("server-timing", "")))

    def logs(self, name: str, *, request_id: Optional[str] = None, after: int = 0,
             limit: Optional[int] = None) -> Dict[str, Any]:
        """One page of the function's log lines, oldest first: {"lines": [{"id", "stream",
        "line", "request_id", "at", ...}], "next": N}; pass "next" as ``after`` for the
        following page. request_id keeps one request's lines; limit is 1..10000 (None: the
        daemon's default)."""
        q: Dict[str, str] = {"after": str(after)}
        if request_id:
            q["request"] = request_id
        if limit is not None:
            q["limit"] = str(limit)
        return self._t.call("GET", self._path(name, "logs") + "?" + urllib.parse.urlencode(q))

    def list(self, *, page_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """Every deployed function, by name (each {"name", "version", "runtime", "mode",
        "state", ...}), following the pages."""
        return list(paginate(self._t, "/v1/functions", page_size))

    def get(self, name: str) -> Dict[str, Any]:
        """One function's record; NotFound when there is none of that name."""
        return self._t.call("GET", self._path(name))

    def remove(self, name: str) -> None:
        """Deletes the function and its versions; NotFound when there is none."""
        self._t.call("DELETE", self._path(name))
