"""SEQPACKET JSON datagrams, the wire format of docs/protocol.md.

Every message is one datagram holding one UTF-8 JSON object with a ``"type"`` key, at most
64 KiB; a ``go`` may carry its event after the object and one newline (the supervisor's JSON
holds no raw newline), as ``Message.payload``. File descriptors travel as ``SCM_RIGHTS``; the child's ``hello`` carries explicit
``SCM_CREDENTIALS``. Both the control socket (fd 3) and the request sockets use this module.
"""

import array
import json
import os
import socket
import struct
from typing import NamedTuple, Optional, Sequence

MAX_DATAGRAM = 64 * 1024
MAX_FDS = 8
_UCRED = struct.Struct("iII")  # struct ucred: pid_t pid; uid_t uid; gid_t gid
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * 4) + socket.CMSG_SPACE(_UCRED.size)


class ProtocolError(Exception):
    """A datagram that is not a valid protocol message (bad JSON, no type, truncated)."""


class Message(NamedTuple):
    """One received message: its ``type``, the whole decoded object, attached fds, and the
    bytes after the object's first newline (``None``: the datagram had no newline).

    The receiver owns ``fds`` (close-on-exec) and must close every one it does not keep.
    """
    type: str
    body: dict
    fds: tuple
    payload: Optional[bytes] = None


# One encoder for every message: json.dumps with options builds a new JSONEncoder per call,
# and in the zygote every object it allocates after a fork lands on a page it shares with its
# children (a copy-on-write fault each).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(msg: dict) -> bytes:
    """Return the datagram for ``msg``; raises ``ValueError`` if it exceeds 64 KiB or is not
    JSON-serialisable, ``TypeError`` for non-JSON values."""
    data = _ENCODER.encode(msg).encode("utf-8")
    if len(data) > MAX_DATAGRAM:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    return data


def send(sock: socket.socket, msg: dict, fds: Sequence[int] = ()) -> None:
    """Send ``msg`` as one datagram, with ``fds`` attached as ``SCM_RIGHTS``.

    Returns nothing. Raises ``ValueError`` for an oversized message and ``OSError`` when the
    socket fails (``BrokenPipeError`` once the peer has gone). The caller keeps its fds.
    """
    ancillary = []
    if fds:
        ancillary.append((socket.SOL_SOCKET, socket.SCM_RIGHTS,
                          array.array("i", fds).tobytes()))
    sock.sendmsg([encode(msg)], ancillary)


def send_with_credentials(sock: socket.socket, msg: dict) -> None:
    """Send ``msg`` with explicit ``SCM_CREDENTIALS`` (this process's pid, uid, gid).

    Explicit credentials reach a receiver that sets ``SO_PASSCRED`` even after the datagram
    was queued; the kernel checks them and translates the pid into the receiver's pid
    namespace. Returns nothing; raises ``OSError`` like :func:`send`.
    """
    send_datagram_with_credentials(sock, encode(msg), os.getpid())


# The process's uid and gid, asked once (at import, in the zygote): a forked child has the
# same ones, and the agent changes neither.
_IDS = (os.getuid(), os.getgid())


def send_datagram_with_credentials(sock: socket.socket, data: bytes, pid: int) -> None:
    """Send the encoded message ``data`` with explicit ``SCM_CREDENTIALS`` naming ``pid``
    (this process's, which the caller has asked) and this process's uid and gid. Returns
    nothing; raises ``OSError`` like :func:`send`."""
    creds = _UCRED.pack(pid, *_IDS)
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])


_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
# recvmsg flags: part of the datagram was lost. A plain int: & with the MsgFlag enums runs
# enum code (Flag.__and__, EnumType.__call__) on every datagram.
TRUNCATED = int(socket.MSG_TRUNC | socket.MSG_CTRUNC)


def recv(sock: socket.socket) -> Optional[Message]:
    """Receive one message. Returns ``None`` at end of stream (the peer closed its end).

    Raises ``ProtocolError`` for a truncated, non-JSON or type-less datagram (any fds that
    came with it are closed first) and ``OSError`` when the socket fails.
    """
    data, ancdata, msg_flags, _ = sock.recvmsg(MAX_DATAGRAM, _ANCILLARY, _RECV_FLAGS)
    return parse(data, _fds_from(ancdata), msg_flags)


def parse(data: bytes, fds: list, msg_flags: int) -> Optional[Message]:
    """Return the message of one received datagram ``data`` with its descriptors ``fds`` and
    the ``recvmsg`` flags ``msg_flags``; ``None`` for end of stream (no data, no fds).
    Raises ``ProtocolError`` as :func:`recv` does (closing ``fds`` first)."""
    if not data and not fds:
        return None
    try:
        if msg_flags & TRUNCATED:
            raise ProtocolError("datagram or its ancillary data was truncated")
        head, newline, payload = data.partition(b"\n")
        kind, body = _decode(head)
        if newline and kind != "go":
            raise ProtocolError(f"bytes after the JSON of a {kind!r} message (only go carries an event)")
        return Message(kind, body, tuple(fds), payload if newline else None)
    except ProtocolError:
        close_all(fds)
        raise


class Receiver:
    """Datagrams of one socket received into a buffer allocated once (``recvmsg_into``), for
    a loop that must allocate little per message: in the zygote every page written after a
    fork is a copy-on-write fault, and ``recvmsg`` allocated a 64 KiB buffer per datagram."""

    def __init__(self, sock: socket.socket):
        self._buf = bytearray(MAX_DATAGRAM)
        self._bufs = [self._buf]
        self._recvmsg_into = sock.recvmsg_into

    def receive(self):
        """Return ``(data, fds, msg_flags)`` of one datagram: ``data`` a ``bytearray`` copy
        of its bytes, ``fds`` the descriptors it carried (close-on-exec, the caller's to
        close). Raises ``OSError`` when the socket fails."""
        size, ancdata, msg_flags, _ = self._recvmsg_into(self._bufs, _ANCILLARY, _RECV_FLAGS)
        return self._buf[:size], (_fds_from(ancdata) if ancdata else []), msg_flags


def close_all(fds: Sequence[int]) -> None:
    """Close every fd in ``fds``, ignoring errors. Returns nothing."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _decode(data: bytes):
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"datagram is not UTF-8 JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ProtocolError("datagram is not a JSON object with a string \"type\"")
    return body["type"], body


def _fds_from(ancdata) -> list:
    fds = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds.extend(array.array("i", payload[:usable]))
    return fds
