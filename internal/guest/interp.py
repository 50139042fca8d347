# The persistent code interpreter of a Zygo sandbox, started by zygo-guest. Commands arrive as
# JSON lines on fd 3 ({"id", "code", "reseed", "max_output", "max_value"}); output and results
# leave as JSON lines on fd 4. The namespace USER survives between calls and, being memory, is
# carried into every fork. Lines on fd 4 stay small: output goes out in chunks of _CHUNK
# characters, at most max_output bytes of it per call (the agent cuts it exactly and marks the
# cut), and a value or traceback is cut at max_value bytes. Fds 1 and 2 are pipes the agent
# reads: what arrives there (os.write, subprocesses) is the running call's output, or dropped.
import ast, io, json, os, signal, sys, threading, traceback

# Processes the user code starts must not hold our pipes: a child left behind would keep fd 4
# open after the interpreter died.
os.set_inheritable(3, False)
os.set_inheritable(4, False)
_cmd = os.fdopen(3, "r", encoding="utf-8")
_ev = os.fdopen(4, "w", encoding="utf-8")
_CHUNK = 64 * 1024
_MAIN = threading.get_ident()
_lock = threading.Lock()  # one event line at a time, whichever thread prints
_state = {"id": 0, "running": False, "emitting": False, "pending": False, "out": 0, "max_output": 16 << 20}


def _emit(obj):
    line = json.dumps(obj) + "\n"
    main = threading.get_ident() == _MAIN
    if main:
        _state["emitting"] = True  # a SIGINT now is held until the line is whole
    try:
        with _lock:
            _ev.write(line)
            _ev.flush()
    finally:
        if main:
            _state["emitting"] = False
    if main and _state["pending"]:
        _state["pending"] = False
        if _state["running"]:
            raise KeyboardInterrupt("run-code timed out")


class _Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name

    def writable(self):
        return True

    def write(self, s):
        n = len(s)
        for i in range(0, n, _CHUNK):
            if _state["out"] > _state["max_output"]:
                break  # over the bound: the agent already has more than it passes on
            c = s[i:i + _CHUNK]
            _state["out"] += len(c.encode("utf-8", "surrogatepass"))
            _emit({"id": _state["id"], "stream": self._name, "data": c})
        return n

    def isatty(self):
        return False


def _on_sigint(signum, frame):
    if not _state["running"]:
        return
    if _state["emitting"]:
        _state["pending"] = True
        return
    raise KeyboardInterrupt("run-code timed out")


def _cut(s, limit):
    """s cut to at most limit UTF-8 bytes, with a marker saying so."""
    if s is None:
        return None
    b = s.encode("utf-8", "surrogatepass")
    if len(b) <= limit:
        return s
    return (b[:limit].decode("utf-8", "ignore") +
            "\n[zygo: value truncated: %d of %d bytes shown]" % (limit, len(b)))


def _load_reseedcore():
    """agents/python/zygo_agent/reseedcore.py (Zygo's one reseed module), whose source the guest
    puts in _RESEED_SOURCE ahead of this file, as a module of its own."""
    mod = type(sys)("_zygo_reseedcore")
    exec(compile(_RESEED_SOURCE, "<zygo reseedcore.py>", "exec"), mod.__dict__)
    return mod


_reseedcore = _load_reseedcore()


def _reseed(seed_hex):
    """Reseed every generator we can reach (random, NumPy, torch, OpenSSL, uuid1, tempfile
    names, every generator object the garbage collector reaches), mixing in the host's seed."""
    _reseedcore.reseed_all(all_generators=True, seed=bytes.fromhex(seed_hex))


USER = {"__name__": "__main__", "__builtins__": __builtins__}


def _run(code):
    tree = ast.parse(code, "<run-code>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<run-code>", "exec"), USER)
    if last is not None:
        v = eval(compile(last, "<run-code>", "eval"), USER)
        if v is not None:
            return repr(v)
    return None


def _main():
    signal.signal(signal.SIGINT, _on_sigint)
    sys.stdout = _Stream("stdout")
    sys.stderr = _Stream("stderr")
    for line in _cmd:
        req = json.loads(line)
        max_value = req.get("max_value", 1 << 20)
        _state.update(id=req["id"], out=0, pending=False, max_output=req.get("max_output", 16 << 20))
        if req.get("reseed"):
            try:
                _reseed(req["reseed"])
            except Exception:
                sys.stderr.write("zygo: reseed failed:\n" + traceback.format_exc())
        try:
            _state["running"] = True
            try:
                res = {"ok": True, "value": _run(req["code"])}
            finally:
                _state["running"] = False
        except BaseException:
            res = {"ok": False, "error": traceback.format_exc()}
        try:
            sys.stdout.flush()
        except Exception:
            pass
        res["value"] = _cut(res.get("value"), max_value)
        res["error"] = _cut(res.get("error"), max_value)
        _emit(dict(res, id=req["id"], done=True))


_main()
