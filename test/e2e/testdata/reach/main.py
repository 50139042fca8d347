"""Tries ptrace-class access, signals and abstract unix socket connections to every other
process a request can see in its sandbox (TestNoProcessInReach).

``{"action": "hold", "seconds": N}`` is the other side: a request that execs a subprocess
(``sleep``, dumpable again after execve) and listens on an abstract unix socket for N
seconds, then checks it can still signal its own subprocess and connect to its own socket.
"""
import errno
import os
import signal
import socket
import subprocess
import time

SOCKET_PREFIX = "zygo-reach-"


def _err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def _first_address(pid):
    """The start of pid's first mapping, or 0x400000 when its maps are unreadable."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return int(f.readline().split("-")[0], 16)
    except (OSError, ValueError, IndexError):
        return 0x400000


def probe(pid):
    """Open /proc/pid/mem read-write and write one byte back where it was read."""
    r = {}
    try:
        r["owner"] = os.stat(f"/proc/{pid}/environ").st_uid
        with open(f"/proc/{pid}/comm") as f:
            r["comm"] = f.read().strip()
    except OSError as e:
        r["owner"] = -1
        r["comm"] = _err(e)
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as e:
        r["open"] = r["write"] = _err(e)
        return r
    r["open"] = "ok"
    try:
        addr = _first_address(pid)
        byte = os.pread(fd, 1, addr)
        os.pwrite(fd, byte, addr)
        r["write"] = "ok"
    except OSError as e:
        r["write"] = _err(e)
    finally:
        os.close(fd)
    return r


def _try(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return _err(e)


def signal_probe(pid):
    """Send PID 1 (the zygote in fork mode) SIGINT, which it handles (KeyboardInterrupt),
    and any other process SIGTERM."""
    return _try(lambda: os.kill(pid, signal.SIGINT if pid == 1 else signal.SIGTERM))


def abstract_sockets():
    """The abstract unix socket names (without the leading NUL) bound by hold requests."""
    names = set()
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) == 8 and fields[7].startswith("@" + SOCKET_PREFIX):
                names.add(fields[7][1:])
    return sorted(names)


def connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(b"\0" + name.encode())
    finally:
        s.close()


def hold(seconds):
    sub = subprocess.Popen(["sleep", "30"])
    name = f"{SOCKET_PREFIX}{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(b"\0" + name.encode())
    listener.listen(8)
    time.sleep(seconds)
    own_connect = _try(lambda: connect(name))
    own_kill = _try(lambda: os.kill(sub.pid, signal.SIGTERM))
    sub.wait()
    listener.close()
    return {"sub": sub.pid, "own_kill": own_kill, "own_connect": own_connect,
            "sub_status": sub.returncode}


def _wait_for_holders(want, seconds):
    """Wait up to ``seconds`` until ``want`` sleep subprocesses and sockets are visible."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        subs = [p for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "sleep"]
        if len(subs) >= want and len(abstract_sockets()) >= want:
            return
        time.sleep(0.05)


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def handler(event, context):
    if event.get("action") == "sleep":
        time.sleep(event.get("seconds", 1))
        return "woke"
    if event.get("action") == "hold":
        return hold(event.get("seconds", 1))
    _wait_for_holders(event.get("holders", 0), 5)
    me = os.getpid()
    own = {int(t) for t in os.listdir(f"/proc/{me}/task")}
    pids = [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != me and int(p) not in own]
    # Signals last: a kill that got through must not hide what the other probes find.
    others = {str(p): probe(p) for p in pids}
    sockets = {name: _try(lambda: connect(name)) for name in abstract_sockets()}
    for p in pids:
        others[str(p)]["signal"] = signal_probe(p)
    return {"self": me, "uid": os.getuid(), "others": others, "sockets": sockets}
