"""Issue 16, a pipe by another name: a helper started at import on a pseudo-terminal (what
``pexpect.spawn`` does), answering each line it reads with ``reply-to:<line>``.

The zygote keeps both ends: MASTER (``/dev/ptmx``) and SLAVE (``/dev/pts/N``). Each request
writes its id to MASTER and reads a reply; it also writes a forged reply into SLAVE, which
the helper's other readers (every request reading MASTER) would see. A request must get its
own reply or a clear error, never another's: the agent gives both ends the pipe policy."""
import errno
import os
import pty
import select
import subprocess
import sys
import time
import tty

MASTER, SLAVE = pty.openpty()
tty.setraw(SLAVE)  # no echo: what a reader gets came from the helper
HELPER = subprocess.Popen(
    [sys.executable, "-u", "-c",
     "import sys, time\nfor l in sys.stdin:\n  time.sleep(0.2)\n"
     "  print('reply-to:' + l.strip(), flush=True)"],
    stdin=SLAVE, stdout=SLAVE, start_new_session=True)


def error_of(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno))


def handler(event, context):
    me = event["id"]
    out = {"write_error": None, "read_error": None, "slave_error": None, "got": ""}
    try:
        os.write(SLAVE, f"reply-to:forged-by-{me}\n".encode())
    except OSError as exc:
        out["slave_error"] = error_of(exc)
    try:
        os.write(MASTER, f"{me}\n".encode())
    except OSError as exc:
        out["write_error"] = error_of(exc)
    got, end = b"", time.monotonic() + float(event.get("wait", 2))
    try:
        while time.monotonic() < end and not got.endswith(b"\n"):
            ready, _, _ = select.select([MASTER], [], [], 0.2)
            if ready:
                got += os.read(MASTER, 1024)
    except OSError as exc:
        out["read_error"] = error_of(exc)
    out["got"] = got.decode(errors="replace").strip()
    return out
