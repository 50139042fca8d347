"""Issue 16, point 4: what the ns sandbox's network namespace really is (docs/security.md,
"Can it reach the network?"), and the namespaces the docs say it unshares."""
import errno
import fcntl
import os
import socket
import struct

IFF_UP, IFF_LOOPBACK = 0x1, 0x8
SIOCGIFFLAGS = 0x8913


def _errno(call):
    try:
        call()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


def loopback_echo():
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname(), timeout=5) as client:
        conn, _ = server.accept()
        with conn:
            client.sendall(b"ping")
            return conn.recv(4).decode()


def handler(event, context):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # no /sys in the sandbox
        ifreq = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
    lo_flags = struct.unpack("16sH22x", ifreq)[1]
    outside = socket.socket()
    outside.settimeout(2)
    with outside:
        leave = _errno(lambda: outside.connect(("10.255.255.1", 80)))
    return {
        "interfaces": sorted(n for _, n in socket.if_nameindex()),
        "lo_up": bool(lo_flags & IFF_UP), "lo_loopback": bool(lo_flags & IFF_LOOPBACK),
        "loopback_echo": loopback_echo(),
        "connect_outside": leave,
        "namespaces": {ns: os.readlink(f"/proc/self/ns/{ns}")
                       for ns in ("user", "pid", "ipc", "uts", "net", "mnt", "cgroup")},
    }
