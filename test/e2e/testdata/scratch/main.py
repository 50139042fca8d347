"""What a request can fill and keep in its sandbox (TestScratchIsBounded).

Actions: ``mounts`` (every mount of the sandbox, from /proc/self/mountinfo, and what a write
to /dev does), ``shm`` (POSIX shared memory and semaphores, as multiprocessing uses them),
``fill`` (``path``: mkdir there until it fails, then write 1 MiB until that fails; keeps what
it made; /tmp and /dev/shm share one tmpfs, so after one is full the other fails at once), ``hold_full`` (fill the request's own TMPDIR to its last inode, say so in
/tmp/filled, keep taking any inode freed until /tmp/release, then free them), ``statvfs`` (``path``'s size and inodes)
and ``ok``.
"""
import errno
import multiprocessing
import multiprocessing.shared_memory
import os
import time


def _err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def mounts():
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            pre, post = pre.split(), post.split()
            out.append({"point": pre[4], "opts": pre[5], "fstype": post[0], "super": post[2] if len(post) > 2 else "",
                        "dir": os.path.isdir(pre[4])})
    try:
        with open("/dev/zygo-write-test", "w"):
            dev = "ok"
    except OSError as e:
        dev = _err(e)
    return {"mounts": out, "dev_write": dev}


def shm():
    seg = multiprocessing.shared_memory.SharedMemory(create=True, size=1 << 20)
    try:
        seg.buf[:5] = b"hello"
        other = multiprocessing.shared_memory.SharedMemory(name=seg.name)
        got = bytes(other.buf[:5]).decode()
        other.close()
    finally:
        seg.close()
        seg.unlink()
    sem = multiprocessing.Semaphore(1)
    with sem:
        pass
    lock = multiprocessing.Lock()
    with lock:
        pass
    return {"read_back": got, "semaphore": "ok"}


def fill(path):
    made, n = [], 0
    try:
        while True:
            os.mkdir(os.path.join(path, "d%d" % n))
            n += 1
    except OSError as e:
        made.append(("mkdir", n, _err(e)))
    # Then bytes: rmdir a few for the files' inodes.
    for i in range(min(8, n)):
        os.rmdir(os.path.join(path, "d%d" % (n - 1 - i)))
    mib = 0
    try:
        with open(os.path.join(path, "big"), "wb") as f:
            while True:
                f.write(b"\xab" * (1 << 20))
                f.flush()
                mib += 1
    except OSError as e:
        made.append(("write", mib, _err(e)))
    return {"steps": made}


def statvfs(path):
    st = os.statvfs(path)
    return {"size_mib": st.f_blocks * st.f_frsize >> 20, "inodes": st.f_files, "free_inodes": st.f_ffree}


def hold_full():
    tmp = os.environ["TMPDIR"]
    n = 0
    try:
        while True:
            os.mkdir(os.path.join(tmp, "d%d" % n))
            n += 1
    except OSError as e:
        err = _err(e)
    open("/tmp/filled", "w").close()
    # Keep taking any inode freed after the fill (a directory of an earlier request whose
    # removal was still under way), so that the tmpfs stays full until released.
    end = time.monotonic() + 20
    while not os.path.exists("/tmp/release") and time.monotonic() < end:
        try:
            while True:
                os.mkdir(os.path.join(tmp, "d%d" % n))
                n += 1
        except OSError:
            pass
        time.sleep(0.01)
    for i in range(n):
        os.rmdir(os.path.join(tmp, "d%d" % i))
    os.unlink("/tmp/filled")
    return {"made": n, "err": err}


def handler(event, context):
    action = event.get("action", "ok")
    if action == "mounts":
        return mounts()
    if action == "shm":
        return shm()
    if action == "fill":
        return fill(event["path"])
    if action == "statvfs":
        return statvfs(event["path"])
    if action == "hold_full":
        return hold_full()
    return "ok"
