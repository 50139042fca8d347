# The persistent code interpreter of a Zygo sandbox, started by zygo-guest. Commands arrive as
# JSON lines on fd 3 ({"id", "code", "reseed"}); output and results leave as JSON lines on fd 4.
# The namespace USER survives between calls and, being memory, is carried into every fork.
import ast, gc, hashlib, io, json, os, random, signal, sys, traceback

_cmd = os.fdopen(3, "r", encoding="utf-8")
_ev = os.fdopen(4, "w", encoding="utf-8")
_state = {"id": 0, "running": False}


def _emit(obj):
    _ev.write(json.dumps(obj) + "\n")
    _ev.flush()


class _Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name

    def writable(self):
        return True

    def write(self, s):
        if s:
            _emit({"id": _state["id"], "stream": self._name, "data": s})
        return len(s)

    def isatty(self):
        return False


def _on_sigint(signum, frame):
    if _state["running"]:
        raise KeyboardInterrupt("run-code timed out")


def _reseed(seed_hex):
    """Reseed every generator we can reach: random, Random objects, NumPy, torch, OpenSSL."""
    material = bytes.fromhex(seed_hex) + os.urandom(32)
    counter = [0]

    def sub(tag):
        counter[0] += 1
        return hashlib.sha256(material + tag + counter[0].to_bytes(8, "little")).digest()

    random.seed(sub(b"random"))
    np = sys.modules.get("numpy")
    for o in gc.get_objects():
        try:
            if isinstance(o, random.Random) and o is not random._inst:
                o.seed(sub(b"obj"))
            elif np is not None and isinstance(o, np.random.Generator):
                bg = o.bit_generator
                bg.state = type(bg)(int.from_bytes(sub(b"npg"), "little")).state
            elif np is not None and isinstance(o, np.random.RandomState):
                o.seed(int.from_bytes(sub(b"nprs")[:4], "little"))
        except Exception:
            pass
    if np is not None:
        np.random.seed(int.from_bytes(sub(b"np")[:4], "little"))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(int.from_bytes(sub(b"torch")[:8], "little") >> 1)
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        ssl.RAND_add(sub(b"ssl"), 32.0)


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
        _state["id"] = req["id"]
        if req.get("reseed"):
            try:
                _reseed(req["reseed"])
            except Exception:
                sys.stderr.write("zygo: reseed failed:\n" + traceback.format_exc())
        _state["running"] = True
        try:
            res = {"ok": True, "value": _run(req["code"])}
        except BaseException:
            res = {"ok": False, "error": traceback.format_exc()}
        finally:
            _state["running"] = False
        try:
            sys.stdout.flush()
        except Exception:
            pass
        _emit(dict(res, id=req["id"], done=True))


_main()
