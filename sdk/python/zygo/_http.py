"""HTTP to the daemon over its unix socket or TCP, with the standard library only.

One connection per call (a unix-socket connect costs microseconds), so a client is safe to
share between threads. Every answer's Zygo-Api-Version is checked before anything else; a
non-2xx answer becomes the exception of its error body (zygo.errors.from_body).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, Union

from . import errors
from ._context import Target
from ._tls import TLSConnection

# The largest error body read (bytes); the rest is ignored.
_MAX_ERROR_BODY = 1 << 20

Body = Union[None, bytes, Iterable[bytes]]


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection to a unix socket. Before any byte is sent the socket's peer must
    run as root or as this process's user (SO_PEERCRED), so a socket another user put in a
    state directory they can change receives no call and no token."""

    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("zygo", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
            _check_peer(s, self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _check_peer(s: socket.socket, path: str) -> None:
    """Raises PermissionError unless the process at the other end of s runs as root or as
    this process's euid (Linux; elsewhere the check is left to the socket's permissions)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return
    creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid not in (0, os.geteuid()):
        raise PermissionError(f"{path} is served by uid {uid}, neither root nor this user: refusing to talk to it")


def _send_duplex(conn: http.client.HTTPConnection, method: str, path: str, headers: Dict[str, str],
                 body: Iterable[bytes]) -> None:
    """Sends the request's head, then its body chunked from a daemon thread as body yields,
    so the caller reads the answer while the body is still going out (an exec's output
    streams back while its stdin is sent; neither side waits for the other's end). A send
    that fails (the daemon answered and closed) ends the thread quietly; what the answer
    says stands. A body that raises abandons the call (the daemon kills the command; the
    caller's read of the answer fails with Unreachable)."""
    conn.putrequest(method, path, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    sock = conn.sock  # not conn.send, which would open a new connection once this one closed

    def pump() -> None:
        it = iter(body)
        while True:
            try:
                chunk = next(it, None)
                data = b"0\r\n\r\n" if chunk is None else b"%x\r\n%b\r\n" % (len(chunk), bytes(chunk))
            except Exception:  # the body failed (a read error): abandon the call, which kills the command
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if chunk is not None and not chunk:
                continue  # an empty chunk would read as the body's end
            try:
                sock.sendall(data)
            except OSError:
                return  # the connection closed under us: the answer is already decided
            if chunk is None:
                return

    threading.Thread(target=pump, name="zygo-request-body", daemon=True).start()


class Transport:
    """Sends calls to one daemon, the Target ``target`` (zygo._context): over its unix
    socket, or TCP to its address, TLS checked against its CA file (else the system's
    roots) and server name, with its token as a bearer token. ``timeout`` (seconds, or None
    for none) bounds each socket operation, not a whole call."""

    def __init__(self, target: Target, timeout: Optional[float] = None):
        self.target = target
        self.socket_path = target.socket_path or None
        self.addr = target.addr or None
        self.token = target.token or None
        self.timeout = timeout
        self._tls: Optional[ssl.SSLContext] = None
        if target.addr and target.tls:
            try:
                self._tls = ssl.create_default_context(cafile=target.ca or None)
            except (OSError, ssl.SSLError) as e:
                raise errors.ConfigError(f"{target.ca_from}: the CA file {target.ca}: {e}") from e

    def where(self) -> str:
        """The socket's path or the TCP address, for messages."""
        if self.addr is None:
            return str(self.socket_path)
        return ("https://" if self._tls is not None else "") + self.addr

    def _connection(self, duplex: bool = False) -> http.client.HTTPConnection:
        if self.addr is None:
            return _UnixConnection(str(self.socket_path), self.timeout)
        if self._tls is not None:
            return TLSConnection(self.addr, context=self._tls, server_name=self.target.server_name,
                                 timeout=self.timeout, duplex=duplex)
        return http.client.HTTPConnection(self.addr, timeout=self.timeout)

    def _unreachable(self, err: Exception) -> errors.ZygoError:
        t = self.target
        if isinstance(err, ssl.SSLCertVerificationError):
            where = t.context_path or "the context file"
            if err.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
                hint = (f"the daemon's certificate is not for {t.server_name or self.addr}: connect by a name it "
                        f"holds, or set server_name (the argument, or server_name in {where})")
            else:
                hint = ("the daemon's certificate is not signed by a CA this client trusts: give its CA (or the "
                        f"certificate itself, if self-signed) with ca=, $ZYGO_CA or ca in {where}")
            return errors.CertificateError(f"the TLS handshake with {self.where()} failed: {err}\n{hint}", self.where())
        if self.addr is not None:
            msg = (f"no Zygo daemon answered at {self.where()} (is `zygo serve --listen {self.addr}` "
                   f"running, and is the address right?): {err}")
        else:
            msg = (f"no Zygo daemon answered on {self.socket_path} (is `zygo serve` running with the "
                   f"same --state-dir?): {err}")
        return errors.Unreachable(msg, self.where())

    def open(self, method: str, path: str, body: Body = None, content_type: Optional[str] = None,
             headers: Optional[Dict[str, str]] = None) -> "Response":
        """Sends one call and returns its 2xx answer, its body unread (the caller closes it).
        body is bytes, or an iterable of bytes sent chunked as it yields. Raises the
        exception of an error answer, ApiVersionMismatch, or Unreachable."""
        streamed = body is not None and not isinstance(body, (bytes, bytearray))
        conn = self._connection(duplex=streamed)
        h = {"Accept-Encoding": "identity"}
        if content_type:
            h["Content-Type"] = content_type
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers or {})
        try:
            if not streamed:
                conn.request(method, path, body=body, headers=h)
            else:
                _send_duplex(conn, method, path, h, body)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._unreachable(e) from e
        answer = Response(conn, resp, self)
        try:
            answer.check()
        except BaseException:
            answer.close()
            raise
        return answer

    def call(self, method: str, path: str, payload: Any = None, *, body: Body = None,
             content_type: Optional[str] = None) -> Any:
        """Sends payload as JSON (or body as it is) and returns the decoded JSON answer, or
        None for an empty one (204)."""
        if payload is not None:
            body, content_type = json.dumps(payload).encode(), "application/json"
        with self.open(method, path, body, content_type) as resp:
            raw = resp.read()
        if not raw.strip():
            return None
        return json.loads(raw)


class Response:
    """A 2xx answer: ``status``, ``headers`` (lower-case names), and its body through
    read() and lines(). A context manager; close() ends the connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, t: "Transport"):
        self._t = t
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def check(self) -> None:
        """Raises ApiVersionMismatch for an answer of another API version, else the
        exception of an error answer."""
        got = self.headers.get("zygo-api-version")
        if got is not None and got.strip() != str(errors.API_VERSION):
            raise errors.ApiVersionMismatch(got.strip())
        if self.status < 300:
            return
        raw = self._resp.read(_MAX_ERROR_BODY)
        try:
            body = json.loads(raw)["error"]
            if not isinstance(body, dict) or not body.get("code"):
                raise ValueError("no code")
        except (ValueError, KeyError, TypeError):
            text = raw.decode("utf-8", "replace").strip()[:512]
            raise errors.HTTPError(f"HTTP {self.status}: {text}", status=self.status,
                                   headers=self.headers) from None
        err = errors.from_body(self.status, body, self.headers)
        err.answer = json.loads(raw)
        raise err

    def read(self) -> bytes:
        try:
            return self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise self._t._unreachable(e) from e

    def lines(self) -> Iterator[Dict[str, Any]]:
        """Yields each line of an NDJSON body, decoded; a body cut short raises Unreachable."""
        try:
            for line in self._resp:
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException) as e:
            raise self._t._unreachable(e) from e

    def close(self) -> None:
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Tuple[Any, ...]) -> None:
        self.close()


def paginate(t: "Transport", path: str, page_size: Optional[int] = None,
             query: Optional[Dict[str, str]] = None) -> Iterator[Dict[str, Any]]:
    """Yields every item of a paginated list route, following next_cursor page by page
    ({"items": [...], "next_cursor": "..."}); page_size is the ?limit= of each page
    (1..1000; None: the daemon's default)."""
    q = dict(query or {})
    if page_size is not None:
        q["limit"] = str(page_size)
    while True:
        sep = "&" if "?" in path else "?"
        page = t.call("GET", path + (sep + urllib.parse.urlencode(q) if q else ""))
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise errors.ZygoError(f"the daemon's answer to GET {path} is not a page of items "
                                   "(is the daemon older than this client?)", status=200, code="http")
        yield from page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return
        q["cursor"] = cursor
