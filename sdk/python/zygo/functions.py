"""Functions: deploy a directory, invoke, read logs, list, get, remove."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import stat
import tarfile
import time
import urllib.parse
from typing import Any, Dict, List, Optional

from ._http import Transport, paginate

#: The largest bundle (gzip'd tar) a deploy takes, bytes.
MAX_BUNDLE_BYTES = 64 << 20


#: The file at the top of a function directory listing what pack_dir leaves out, in the subset
#: of .gitignore's syntax the Go SDK's IgnoreFile documents (# comments, !negation, PATTERN/
#: for directories only, a pattern holding a / anchored at the directory, * ? [a-z] within a
#: name, ** across directories, the last matching pattern decides).
IGNORE_FILE = ".zygoignore"

#: Left out of every bundle before IGNORE_FILE is read (!node_modules/ takes one back).
DEFAULT_IGNORES = ("__pycache__/", ".venv/", "node_modules/")


def _name_regex(pat: str) -> "re.Pattern":
    """Compiles one name pattern with Go's path.Match semantics (* and ? never match /,
    [^a-z] negates a class, \\ escapes); raises ValueError on a malformed pattern."""
    out, i, n = [], 0, len(pat)

    def esc(j):
        if j >= n or pat[j] in "-]":
            raise ValueError("syntax error in pattern")
        if pat[j] == "\\":
            j += 1
            if j >= n:
                raise ValueError("syntax error in pattern")
        return pat[j], j + 1

    while i < n:
        c = pat[i]
        if c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "\\":
            if i + 1 >= n:
                raise ValueError("syntax error in pattern")
            out.append(re.escape(pat[i + 1]))
            i += 2
        elif c == "[":
            i += 1
            neg = i < n and pat[i] == "^"
            if neg:
                i += 1
            ranges = []
            while True:
                if i < n and pat[i] == "]" and ranges:
                    i += 1
                    break
                lo, i = esc(i)
                hi = lo
                if i < n and pat[i] == "-":
                    hi, i = esc(i + 1)
                ranges.append(re.escape(lo) + "-" + re.escape(hi) if lo != hi else re.escape(lo))
            cls = "".join(ranges)
            out.append(f"(?:(?!/)[^{cls}])" if neg else f"[{cls}]")
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _parse_ignore(text: str, source: str) -> list:
    """Parses patterns in IGNORE_FILE's syntax into (negate, dir_only, anchored, parts) with
    parts a list of compiled names (None for **); source names the text in errors."""
    rules = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip(" \t\r")
        if not line or line.startswith("#"):
            continue
        negate = dir_only = False
        if line.startswith("!"):
            negate, line = True, line[1:]
        elif line.startswith("\\#") or line.startswith("\\!"):
            line = line[1:]
        if line.endswith("/"):
            dir_only, line = True, line.rstrip("/")
        anchored = "/" in line
        if line.startswith("/"):
            line = line[1:]
        if not line:
            continue
        try:
            parts = [None if p == "**" else _name_regex(p) for p in line.split("/")]
        except ValueError as e:
            raise ValueError(f"{source} line {n}: {raw!r} is not a valid pattern: {e}") from None
        rules.append((negate, dir_only, anchored, parts))
    return rules


def _match_parts(pat: list, name: list) -> bool:
    if not pat:
        return not name
    if pat[0] is None:
        return any(_match_parts(pat[1:], name[i:]) for i in range(len(name) + 1))
    return bool(name) and pat[0].fullmatch(name[0]) is not None and _match_parts(pat[1:], name[1:])


def _ignored(rules: list, rel: str, is_dir: bool) -> bool:
    """Whether rel (slash-separated, relative to the function directory) is left out: the last
    rule that matches it decides; zygo.toml never is."""
    if rel == "zygo.toml":
        return False
    name = rel.split("/")
    out = False
    for negate, dir_only, anchored, parts in rules:
        if dir_only and not is_dir:
            continue
        if _match_parts(parts, name if anchored else name[-1:]):
            out = not negate
    return out


def _load_ignore(directory: str) -> list:
    rules = _parse_ignore("\n".join(DEFAULT_IGNORES), "defaults")
    try:
        with open(os.path.join(directory, IGNORE_FILE), encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        return rules
    except OSError as e:
        raise ValueError(f"reading {IGNORE_FILE}: {e}") from None
    return rules + _parse_ignore(text, IGNORE_FILE)


def pack_dir(directory: str) -> bytes:
    """Returns the bundle a deploy uploads for the function directory (the one holding
    zygo.toml): a gzip'd tar of its regular files (mode 0755 when executable, else 0644) and
    directories, paths relative to it in lexical depth-first order, leaving out directories
    named .git, DEFAULT_IGNORES and what its IGNORE_FILE (.zygoignore) names: the entries,
    modes and order the Go SDK's PackDir writes, so all three deploy it as the same version. A symbolic link, device, socket or pipe that is not
    left out raises ValueError naming its path (a bundle must not point outside itself); so
    does a path that is not a directory, and an IGNORE_FILE line that is not a valid pattern
    (naming the line)."""
    if not os.path.isdir(directory):
        raise ValueError(f"packing {directory}: not a directory: a function is the directory holding zygo.toml")
    try:
        rules = _load_ignore(directory)
    except ValueError as e:
        raise ValueError(f"packing {directory}: {e}") from None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tw:
        def walk(rel_dir: str) -> None:
            for name in sorted(os.listdir(os.path.join(directory, rel_dir)), key=os.fsencode):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                path = os.path.join(directory, rel)
                st = os.lstat(path)
                is_dir = stat.S_ISDIR(st.st_mode)
                if (is_dir and name == ".git") or _ignored(rules, rel, is_dir):
                    continue
                info = tarfile.TarInfo(rel)
                if is_dir:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tw.addfile(info)
                    walk(rel)
                elif stat.S_ISREG(st.st_mode):
                    info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tw.addfile(info, f)
                else:
                    raise ValueError(f"packing {directory}: {rel}: not a regular file or directory "
                                     "(links are not allowed in a function)")
        walk("")
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
