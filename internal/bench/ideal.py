"""The ideal fork-per-request server the warm path is measured against
(issue 15): the handler's module (NumPy) imported once; a child forked ahead
and blocked on a pipe; per request the parent writes the event to an idle
child, which reseeds random and NumPy from os.urandom, runs the handler,
writes the JSON back and _exits; the parent reaps off the path and forks the
replacement. No sandbox, cgroup, secrets or logs: the floor of the design.

Usage: python3 ideal.py SOCKET HANDLER_DIR MODULE:FUNC POOL
Clients connect to SOCKET (AF_UNIX stream) and send one JSON event per line;
each line gets one JSON line back, in order. "ready" is printed once listening.
"""
import json, os, random, selectors, socket, sys

sock_path, code_dir, entry, pool_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, code_dir)
mod_name, fn_name = entry.split(":")
handler = getattr(__import__(mod_name), fn_name)
import numpy


class Context:
    request_id = "ideal"


def child(ev_r, res_w):
    line = os.read(ev_r, 1 << 20)
    if not line:  # the server went away before a request came
        os._exit(0)
    event = json.loads(line)
    random.seed(os.urandom(32))
    numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
    try:
        out = {"ok": True, "value": handler(event, Context())}
    except Exception as e:  # noqa: BLE001 - the handler's failure is the answer
        out = {"ok": False, "error": repr(e)}
    os.write(res_w, json.dumps(out).encode())
    os._exit(0)


def fork_one():
    ev_r, ev_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ev_w), os.close(res_r)
        child(ev_r, res_w)
    os.close(ev_r), os.close(res_w)
    return ev_w, res_r


sel = selectors.DefaultSelector()
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sock_path)
srv.listen(64)
sel.register(srv, selectors.EVENT_READ, "accept")
idle = [fork_one() for _ in range(pool_size)]
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        kind = key.data
        if kind == "accept":
            conn, _ = srv.accept()
            sel.register(conn, selectors.EVENT_READ, ("conn", conn, bytearray()))
        elif kind[0] == "conn":
            conn, buf = kind[1], kind[2]
            data = conn.recv(1 << 16)
            if not data:
                sel.unregister(conn), conn.close()
                continue
            buf += data
            while b"\n" in buf:
                line, _, rest = bytes(buf).partition(b"\n")
                buf[:] = rest
                ev_w, res_r = idle.pop() if idle else fork_one()
                os.write(ev_w, line)
                os.close(ev_w)
                sel.register(res_r, selectors.EVENT_READ, ("result", conn))
        else:  # a child's result
            res_r, conn = key.fd, kind[1]
            sel.unregister(res_r)
            out = os.read(res_r, 1 << 20)
            os.close(res_r)
            conn.sendall(out + b"\n")
            # Off the path: reap whoever exited, refill the pool.
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
            while len(idle) < pool_size:
                idle.append(fork_one())
