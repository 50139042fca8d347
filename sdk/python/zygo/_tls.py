"""TLS to a remote daemon: the connection, and a relay for calls whose body streams while
the answer is read.

An ssl.SSLSocket must not be used from two threads at once (OpenSSL's SSL object is not
thread-safe, and CPython releases the GIL inside SSL_read and SSL_write). A call whose body
is sent from a thread while the caller reads the answer (an exec's streaming stdin) would
do exactly that, so for such a call the TLS socket is owned by one relay thread, which
moves bytes between it and one end of a local socket pair with select(); the HTTP code
reads and writes the pair's other end, a plain socket that two threads may share (one
sending, one receiving).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from typing import Optional

# The most bytes buffered in the relay in each direction before it stops reading that way.
_RELAY_BUFFER = 1 << 18


class TLSConnection(http.client.HTTPConnection):
    """An HTTPS connection to host:port, verified with context against server_name (the
    host when empty). With duplex set, connect() leaves a relay thread owning the TLS
    socket and self.sock a plain socket to it (see the top of this module)."""

    def __init__(self, hostport: str, *, context: ssl.SSLContext, server_name: str,
                 timeout: Optional[float], duplex: bool = False):
        super().__init__(hostport, timeout=timeout)
        self._context = context
        self._server_name = server_name or self.host
        self._duplex = duplex

    def connect(self) -> None:
        super().connect()  # TCP, with the timeout
        tls = self._context.wrap_socket(self.sock, server_hostname=self._server_name)  # handshake; may raise
        if not self._duplex:
            self.sock = tls
            return
        mine, theirs = socket.socketpair()
        mine.settimeout(self.timeout)
        threading.Thread(target=_relay, args=(tls, theirs), name="zygo-tls-relay", daemon=True).start()
        self.sock = mine


def _relay(tls: ssl.SSLSocket, local: socket.socket) -> None:
    """Moves bytes between tls and local until either ends, then closes both. The only
    thread that touches tls. The end of the TLS stream is passed on as local's write side
    shut (the reader sees the answer's end); local's end (the call closed or abandoned)
    closes the TLS connection at once."""
    try:
        tls.setblocking(False)
        local.setblocking(False)
        _pump(tls, local)
    except (OSError, ValueError):
        pass  # a reset or a TLS error: closing local ends the reader's answer short (Unreachable)
    finally:
        for s in (tls, local):
            try:
                s.close()
            except OSError:
                pass


def _pump(tls: ssl.SSLSocket, local: socket.socket) -> None:
    to_tls = b""       # read from local, not yet written to tls
    writing = b""      # the record being written to tls (retried unchanged after SSLWantWrite)
    to_local = b""     # read from tls, not yet written to local
    tls_eof = False
    want_write_to_read = False  # tls.recv wants to write first (renegotiation)
    while True:
        if tls_eof and not to_local:
            local.shutdown(socket.SHUT_WR)  # the answer is complete; wait for the caller to close
            _drain(local)
            return
        rl, wl = [], []
        if not tls_eof and len(to_local) < _RELAY_BUFFER:
            (wl if want_write_to_read else rl).append(tls)
        if len(to_tls) < _RELAY_BUFFER:
            rl.append(local)
        if writing or to_tls:
            wl.append(tls)
        if to_local:
            wl.append(local)
        if not (tls in rl and tls.pending()):  # bytes OpenSSL already decrypted are not seen by select
            rl, wl, _ = select.select(rl, wl, [])
        if tls in rl or (want_write_to_read and tls in wl):
            want_write_to_read = False
            try:
                data = tls.recv(65536)
                if data:
                    to_local += data
                else:
                    tls_eof = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLWantWriteError:
                want_write_to_read = True
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                tls_eof = True
        if local in rl:
            try:
                data = local.recv(65536)
            except BlockingIOError:
                data = None
            if data == b"":
                return  # the caller closed the call (or abandoned it): close the TLS connection
            if data:
                to_tls += data
        if tls in wl and (writing or to_tls):
            if not writing:
                writing, to_tls = to_tls[:16384], to_tls[16384:]
            try:
                tls.send(writing)
                writing = b""
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                pass
        if local in wl and to_local:
            try:
                n = local.send(to_local)
                to_local = to_local[n:]
            except BlockingIOError:
                pass


def _drain(local: socket.socket) -> None:
    """Reads and drops what local still sends until the caller closes it (a body still
    going out after the answer ended goes nowhere, as on a closed connection)."""
    local.setblocking(True)
    while local.recv(65536):
        pass
