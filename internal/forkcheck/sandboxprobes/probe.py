# The Python side of `zygo check sandboxes`, run inside the sandbox by /usr/bin/python3.
#
#   probe.py listener DIR PORT        a TCP listener on 127.0.0.1:PORT that answers each "ping"
#                                     line with "pong"; DIR/listener.ready when it listens
#   probe.py live DIR PORT TIMER_S    the long-lived probe (see live below)
#   probe.py service DIR NAME         a declared service (on_fork = restart): draws at start,
#                                     reports at the trigger as DIR/NAME.json
#   probe.py fresh                    a process started after the copy: one JSON line of draws
#   probe.py wait DIR TIMEOUT_S F...  waits for DIR/F for each F; prints {F: contents} as JSON
#
# Every file the probes hand over is written whole (temp file, then rename), so a reader never
# sees half of one. Values are JSON: floats as numbers, bytes as hex, the rest as strings.
import json, os, random, secrets, signal, socket, ssl, sys, threading, time, uuid

import numpy as np

TRIGGER = "go"
CONTROL = "control: random.Random(42), a fixed seed"


def draws():
    """One value from every generator the seed asked, in a fixed order."""
    return {
        "random.random()": random.random(),
        "numpy np.random.random()": float(np.random.random()),
        "uuid.uuid4()": str(uuid.uuid4()),
        "os.urandom(16)": os.urandom(16).hex(),
        "secrets.token_hex(16)": secrets.token_hex(16),
        "ssl.RAND_bytes(16)": ssl.RAND_bytes(16).hex(),
    }


def publish(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return "error: " + e.strerror


def wait_trigger(d):
    while not os.path.exists(os.path.join(d, TRIGGER)):
        time.sleep(0.02)


def listener(d, port):
    srv = socket.create_server(("127.0.0.1", int(port)))

    def serve(conn):
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                conn.sendall(b"pong " + line)

    publish(os.path.join(d, "listener.ready"), {"pid": os.getpid()})
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def ask(conn, lines, msg):
    """Sends one line on a kept-alive connection; returns what became of it."""
    try:
        conn.sendall(msg + b"\n")
        got = lines.readline()
    except socket.timeout:
        return "timed out"
    except OSError as e:
        return "error: " + (e.strerror or type(e).__name__)
    if not got:
        return "closed"
    return "answered" if got == b"pong " + msg + b"\n" else "wrong answer"


EXT_PORT = 7412
EXT_ROW = "connection from the host, open at the checkpoint"


def held_outcome(c):
    """What became of the host's connection in this copy: "fails fast" when a write or read
    fails (or reads EOF) within 2 s, "hangs" when nothing happens for 10 s, "works" when the
    host answers."""
    if c is None:
        return "never connected"
    t0 = time.monotonic()
    c.settimeout(10)
    try:
        c.sendall(b"after\n")
        got = c.recv(64)
    except socket.timeout:
        return "hangs"
    except OSError:
        got = b""
    if got:
        return "works"
    return "fails fast" if time.monotonic() - t0 < 2 else "fails after %.0f s" % (time.monotonic() - t0)


def live(d, port, timer_s):
    """Sets itself up like a server that was running at the checkpoint: every generator drawn
    once, a timer armed, a line left in a write buffer, a connection open; then waits for the
    trigger and records what this copy sees."""
    draws()
    conn = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    lines = conn.makefile("rb")
    first = ask(conn, lines, b"before")
    buffered = open(os.path.join(d, "unflushed.txt"), "w")  # 8 KiB buffer: nothing reaches the file yet
    buffered.write("written before the checkpoint\n")
    fired = {}

    def on_alarm(signum, frame):
        fired.update(wall=time.time(), mono=time.monotonic())

    signal.signal(signal.SIGALRM, on_alarm)
    armed = {"wall": time.time(), "mono": time.monotonic()}
    signal.setitimer(signal.ITIMER_REAL, float(timer_s))
    # A port the host connects to before the checkpoint (on the sandbox's own address): the
    # connection that crosses the sandbox's edge, open at the checkpoint.
    ext = socket.socket()
    ext.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ext.bind(("0.0.0.0", EXT_PORT))
    ext.listen(1)
    held = {}

    def hold():
        c, _ = ext.accept()
        c.sendall(c.recv(64))  # the host's hello, echoed: the connection is up
        held["conn"] = c

    threading.Thread(target=hold, daemon=True).start()
    publish(os.path.join(d, "python.ready"), {"pid": os.getpid(), "armed": armed, "connection": first})

    wait_trigger(d)
    rows = draws()
    rows["pid"] = os.getpid()
    rows[CONTROL] = random.Random(42).random()  # built to repeat; see WithSandboxControl
    trig = {"wall": time.time(), "mono": time.monotonic()}
    ident = {}
    try:
        ident = json.loads(read("/run/zygo/identity.json"))
    except ValueError:
        pass
    sbx = {
        "hostname": socket.gethostname(),
        "/etc/machine-id": read("/etc/machine-id"),
        "boot_id": read("/proc/sys/kernel/random/boot_id"),
        "/run/zygo/generation": read("/run/zygo/generation"),
        "sandbox id (identity.json)": ident.get("sandbox_id", ""),
    }
    conn.settimeout(3)
    sbx["connection to a listener in the sandbox"] = ask(conn, lines, b"after")
    sbx[EXT_ROW] = held_outcome(held.get("conn"))
    buffered.write("written in the copy\n")
    buffered.close()
    sbx["unflushed line survived"] = read(os.path.join(d, "unflushed.txt")) == \
        "written before the checkpoint\nwritten in the copy"
    deadline = armed["mono"] + float(timer_s) + 30
    while not fired and time.monotonic() < deadline:
        time.sleep(0.01)
    publish(os.path.join(d, "python.json"), {"rows": rows, "sandbox": sbx, "clock": {
        "armed": armed, "trigger": trig, "fired": fired or None, "timer_s": float(timer_s),
        "suspended_ns": ident.get("suspended_ns")}})


def service(d, name):
    draws()
    publish(os.path.join(d, name + ".ready"), {"pid": os.getpid()})
    wait_trigger(d)
    rows = draws()
    rows["pid"] = os.getpid()
    publish(os.path.join(d, name + ".json"), {"rows": rows})


def wait(d, timeout_s, names):
    deadline = time.monotonic() + float(timeout_s)
    out = {}
    while time.monotonic() < deadline:
        for n in names:
            if n not in out and os.path.exists(os.path.join(d, n)):
                with open(os.path.join(d, n)) as f:
                    out[n] = json.load(f)
        if len(out) == len(names):
            break
        time.sleep(0.02)
    json.dump(out, sys.stdout)
    missing = [n for n in names if n not in out]
    if missing:
        sys.stderr.write("timed out after %ss waiting for %s\n" % (timeout_s, ", ".join(missing)))
        sys.exit(1)


def main(argv):
    mode = argv[1]
    if mode == "listener":
        listener(argv[2], argv[3])
    elif mode == "live":
        live(argv[2], argv[3], argv[4])
    elif mode == "service":
        service(argv[2], argv[3])
    elif mode == "fresh":
        rows = draws()
        rows["pid"] = os.getpid()
        json.dump(rows, sys.stdout)
    elif mode == "wait":
        wait(argv[2], argv[3], argv[4:])
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main(sys.argv)
