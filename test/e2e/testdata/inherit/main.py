"""Issue 16, point 1: a file and a pipe to a helper process, both opened at import.

Each request reads one 16-byte record from RECORDS (every request must read the first one)
and asks HELPER for an echo of its own id (every request must get its own reply, or a clear
error: the agent gives the pipes a clear error)."""
import errno
import os
import subprocess
import sys

RECORD = 16
RECORDS = open(os.path.join(os.path.dirname(__file__), "records.txt"), "rb", buffering=0)
HELPER = subprocess.Popen(
    [sys.executable, "-u", "-c", "import sys\nfor line in sys.stdin: sys.stdout.write(line)"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)


def error_of(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) \
        else type(exc).__name__


def handler(event, context):
    record = RECORDS.read(RECORD).decode().strip()
    try:
        HELPER.stdin.write(f"reply for {event['id']}\n".encode())
        write = None
    except OSError as exc:
        write = error_of(exc)
    try:
        reply = HELPER.stdout.readline().decode().strip()
        read = None
    except OSError as exc:
        reply, read = None, error_of(exc)
    return {"record": record, "reply": reply, "write_error": write, "read_error": read,
            "helper_pid": HELPER.pid}
