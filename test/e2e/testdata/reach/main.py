"""Tries ptrace-class access, signals and abstract unix socket connections to every other
process a request can see in its sandbox (TestNoProcessInReach).

Each probe also tries to write ``oom_score_adj``, ``clear_refs`` and ``sched`` of every
process. ``{"action": "namespaces"}`` asks for new namespaces (clone with CLONE_NEWUSER,
unshare, clone3).

``{"action": "hold", "seconds": N}`` is the other side: a request that execs a subprocess
(``sleep``, dumpable again after execve) and listens on an abstract unix socket for N
seconds, then checks it can still signal its own subprocess and connect to its own socket.

``{"action": "retarget"}`` calls, on every other process it sees, each syscall that changes
another process's limits, priority or scheduling by pid (prlimit64 with a new limit,
setpriority, sched_setaffinity, sched_setscheduler, sched_setparam, sched_setattr,
ioprio_set) and those that act on another's memory through the ptrace access check
(migrate_pages, move_pages, process_madvise), with values that would break the target; then
the same calls on itself (pid 0); ``{"action": "limits"}`` reports what the request's own
process inherited (rlimits, nice, affinity, policy, I/O priority).
"""
import ctypes
import errno
import os
import platform
import resource
import signal
import socket
import struct
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


# /proc files of another process its uid may write when it is dumpable (what a sibling
# execs), with values that change it: the request's Landlock domain must refuse each open.
PROC_WRITES = (("oom_score_adj", b"1000"), ("clear_refs", b"1"), ("sched", b"0"))


def proc_writes(pid):
    out = {}
    for name, value in PROC_WRITES:
        try:
            fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
        except OSError as e:
            out[name] = _err(e)
            continue
        try:
            os.write(fd, value)
            out[name] = "ok"
        except OSError as e:
            out[name] = "opened, write " + _err(e)
        finally:
            os.close(fd)
    return out


def namespaces():
    """Ask for new namespaces from a request: clone(2) with CLONE_NEWUSER (alone and with
    CLONE_NEWNET), unshare(CLONE_NEWUSER) and clone3."""
    newuser, newnet, sigchld = 0x10000000, 0x40000000, 17

    def clone(flags):
        pid = _libc.syscall(ctypes.c_long(_NR["clone"]), ctypes.c_ulong(flags | sigchld),
                            None, None, None, ctypes.c_ulong(0))
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
            return "ok"
        return errno.errorcode.get(ctypes.get_errno())

    args = (ctypes.c_ulong * 11)(newuser, 0, 0, 0, sigchld, 0, 0, 0, 0, 0, 0)  # clone_args
    pid = _libc.syscall(ctypes.c_long(_NR["clone3"]), args, ctypes.c_size_t(88))
    if pid == 0:
        os._exit(0)
    clone3 = "ok" if pid > 0 else errno.errorcode.get(ctypes.get_errno())
    if pid > 0:
        os.waitpid(pid, 0)
    return {"clone_newuser": clone(newuser), "clone_newuser_newnet": clone(newuser | newnet),
            "unshare_newuser": "ok" if _libc.unshare(newuser) == 0
            else errno.errorcode.get(ctypes.get_errno()),
            "clone3_newuser": clone3,
            "thread": _thread_works()}


def _thread_works():
    import threading
    box = []
    t = threading.Thread(target=lambda: box.append(1))
    t.start()
    t.join()
    return box == [1]


def probe(pid):
    """Open /proc/pid/mem read-write and write one byte back where it was read; try the
    writes of PROC_WRITES."""
    r = {"proc_writes": proc_writes(pid)}
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


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# x86_64 and aarch64 numbers of the raw calls Python has no wrapper for.
_NR = {"x86_64": {"clone": 56, "clone3": 435, "sched_setattr": 314, "ioprio_set": 251, "ioprio_get": 252, "migrate_pages": 256,
                  "move_pages": 279, "process_madvise": 440, "pidfd_open": 434},
       "aarch64": {"clone": 220, "clone3": 435, "sched_setattr": 274, "ioprio_set": 30, "ioprio_get": 31, "migrate_pages": 238,
                   "move_pages": 239, "process_madvise": 440, "pidfd_open": 434}}[platform.machine()]
_IOPRIO_WHO_PROCESS, _IOPRIO_IDLE = 1, 3 << 13
_MADV_COLD = 20


def _raw(name, *args):
    r = _libc.syscall(ctypes.c_long(_NR[name]),
                      *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return "ok"


def _sched_attr(policy, nice):
    return ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, policy, 0, nice, 0, 0, 0, 0, 0, 0))


def _process_madvise(pid):
    fd = _libc.syscall(ctypes.c_long(_NR["pidfd_open"]), ctypes.c_long(pid), ctypes.c_long(0))
    if fd < 0:
        return errno.errorcode.get(ctypes.get_errno())
    try:
        iov = struct.pack("=QQ", _first_address(pid), 4096)
        return _raw("process_madvise", fd, ctypes.create_string_buffer(iov), 1, _MADV_COLD, 0)
    finally:
        os.close(fd)


def retarget(pid):
    """What would break pid (another process) or, for pid 0, change only the caller."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    hostile = pid != 0
    r = {
        "prlimit_fsize": _try(lambda: resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, 0))) if hostile
        else _try(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, nofile)),
        "prlimit_nofile": _try(lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3) if hostile else nofile)),
        "setpriority": _try(lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
        "sched_setaffinity": _try(lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})),
        "sched_setattr": _raw("sched_setattr", pid, _sched_attr(0, 19), 0),
        "sched_setparam": _try(lambda: os.sched_setparam(pid, os.sched_param(0))),
        "sched_setscheduler": _try(lambda: os.sched_setscheduler(pid, os.SCHED_IDLE if hostile else os.SCHED_BATCH,
                                                                 os.sched_param(0))),
        "ioprio_set": _raw("ioprio_set", _IOPRIO_WHO_PROCESS, pid, _IOPRIO_IDLE),
    }
    if hostile:
        # Through the ptrace access check: the agents' non-dumpable flag and Landlock guard these.
        r["migrate_pages"] = _raw("migrate_pages", pid, 64, ctypes.c_char_p(b"\x01" * 8), ctypes.c_char_p(b"\x01" * 8))
        r["move_pages"] = _raw("move_pages", pid, 0, None, None, None, 0)
        r["process_madvise"] = _process_madvise(pid)
    return r


def limits():
    """What this request's process inherited from its zygote."""
    return {"fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cpus": len(os.sched_getaffinity(0)),
            "policy": os.sched_getscheduler(0),
            "ioprio": _libc.syscall(ctypes.c_long(_NR["ioprio_get"]), ctypes.c_long(_IOPRIO_WHO_PROCESS),
                                    ctypes.c_long(0))}


def handler(event, context):
    if event.get("action") == "sleep":
        time.sleep(event.get("seconds", 1))
        return "woke"
    if event.get("action") == "hold":
        return hold(event.get("seconds", 1))
    if event.get("action") == "limits":
        return limits()
    if event.get("action") == "namespaces":
        return namespaces()
    if event.get("action") == "retarget":
        me = os.getpid()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
        return {"self": me, "comm": {str(p): _comm(str(p)) for p in pids},
                "others": {str(p): retarget(p) for p in pids}, "own": retarget(0),
                "own_user": _try(lambda: os.setpriority(os.PRIO_USER, 0, 19)),
                "own_pgrp": _try(lambda: os.setpriority(os.PRIO_PGRP, 0, 19)),
                "own_ioprio_user": _raw("ioprio_set", 3, 0, _IOPRIO_IDLE)}
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
