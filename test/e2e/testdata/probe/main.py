"""A probe function for the end-to-end tests: each action reports one fact
about the child it runs in, or misbehaves in one way."""
import atexit
import errno
import os
import random
import signal
import socket
import sys
import tempfile
import time

import numpy as np

STATE = {"counter": 0}          # a global a request may change
ZYGOTE_PID = os.getpid()         # the pid at import time is the zygote's
print("probe-import-marker", end="\n")  # unflushed at import (stdout is a pipe)
ALIVE = "/tmp/zygote.alive"
open(ALIVE, "w").close()
atexit.register(lambda: os.path.exists(ALIVE) and os.remove(ALIVE))

def _status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None

def _try(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def info(event, context):
    def connect():
        s = socket.socket()
        s.settimeout(1)
        try:
            s.connect(("1.1.1.1", 53))
        finally:
            s.close()
    return {
        "uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "ppid": os.getppid(),
        "zygote_pid": ZYGOTE_PID, "cap_eff": _status("CapEff"), "seccomp": _status("Seccomp"),
        "no_new_privs": _status("NoNewPrivs"), "hostname": socket.gethostname(),
        "root_listing": sorted(os.listdir("/")),
        "write_usr": _try(lambda: open("/usr/zygo-probe", "w")),
        "write_root": _try(lambda: open("/zygo-probe", "w")),
        "write_code": _try(lambda: open("/code/zygo-probe", "w")),
        "write_tmp": _try(lambda: open("/tmp/zygo-probe", "w").close()),
        "connect": _try(connect),
        "interfaces": sorted(n for _, n in socket.if_nameindex()),
        "mount": _try(lambda: __import__("ctypes").CDLL(None, use_errno=True).syscall(165, b"x", b"/tmp", b"tmpfs", 0, None) == 0 or (_ for _ in ()).throw(OSError(__import__("ctypes").get_errno(), "mount"))),
        "tmpdir": tempfile.gettempdir(), "env_tmpdir": os.environ.get("TMPDIR"),
        "request_id": context.request_id, "function": context.function,
        "ssl_private": os.path.exists("/etc/ssl/private"), "ssl_certs": os.path.isdir("/etc/ssl/certs"),
    }

def rng(event, context):
    return {"random": random.random(), "np": int(np.random.randint(0, 2**62)),
            "urandom": os.urandom(8).hex(), "pid": os.getpid()}

def set_global(event, context):
    before = STATE["counter"]
    STATE["counter"] += 1
    STATE["who"] = context.request_id
    random.seed(1234)  # a request that pins the global generator must not pin the next one
    return {"before": before, "who_before": None}

def get_global(event, context):
    return {"counter": STATE["counter"], "who": STATE.get("who"), "random": random.random()}

def fds(event, context):
    out = []
    for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
        try:
            out.append([fd, os.readlink(f"/proc/self/fd/{fd}")])
        except OSError:
            pass
    return out

def forge(event, context):
    """Write forged protocol messages to every descriptor we have."""
    forged = b'{"type":"exited","seq":1,"pid":1,"code":0}'
    wrote = []
    for f in os.listdir("/proc/self/fd"):
        fd = int(f)
        if fd in (0, 1, 2):
            continue
        try:
            os.write(fd, forged)
            wrote.append(fd)
        except OSError:
            pass
    return {"wrote": wrote}

def tmp(event, context):
    d = tempfile.gettempdir()
    path = os.path.join(d, "mine.txt")
    with open(path, "w") as f:
        f.write(context.request_id)
    listing = {}
    try:
        listing["req_parent"] = os.listdir(os.path.dirname(d.rstrip("/").rsplit("/", 1)[0]))
    except OSError as e:
        listing["req_parent"] = errno.errorcode.get(e.errno)
    if event.get("crash"):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"tmpdir": d, "file": path, "listing": listing}

def crash(event, context):
    os.kill(os.getpid(), getattr(signal, event.get("signal", "SIGSEGV")))

def sleep(event, context):
    time.sleep(event.get("seconds", 10))
    return "woke"

def fail(event, context):
    raise ValueError("bad input: " + str(event.get("why")))

def say(event, context):
    print("stdout line from", context.request_id)
    print("stderr line from", context.request_id, file=sys.stderr)
    atexit.register(print, "child-exit", context.request_id)
    return "said"

def big(event, context):
    return "x" * (event.get("kib", 128) * 1024)

def alive(event, context):
    return os.path.exists(ALIVE)

def kill_zygote(event, context):
    try:  # the zygote is PID 1 (the kernel drops SIGKILL) outside our Landlock domain (EPERM)
        os.kill(os.getppid(), signal.SIGKILL)
    except PermissionError:
        pass
    time.sleep(0.5)
    return "still here"

def unserialisable(event, context):
    return {"obj": object()}

def handler(event, context):
    return globals()[event["action"]](event, context)


def attack(event, context):
    """Try to reach other processes of the sandbox: the zygote and siblings."""
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except OSError as e:
            out[name] = errno.errorcode.get(e.errno, str(e.errno))
    attempt("zygote mem rw", lambda: open(f"/proc/{os.getppid()}/mem", "r+b").close())
    attempt("zygote environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
    attempt("zygote fd", lambda: os.listdir(f"/proc/{os.getppid()}/fd"))
    others = {}
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in (os.getpid(), os.getppid(), 1):
            try:
                os.listdir(f"/proc/{p}/fd")
                others[p] = "ok"
            except OSError as e:
                others[p] = errno.errorcode.get(e.errno, str(e.errno))
    out["others fd"] = others
    attempt("self fd", lambda: os.listdir("/proc/self/fd"))
    return out


def deadline(event, context):
    return {"remaining_ms": context.remaining_ms(), "deadline": context.deadline, "now": time.time()}


async def _async_work(x):
    import asyncio
    await asyncio.sleep(0.01)
    return x * 2


def async_handler(event, context):
    return _async_work(event.get("x", 21))
