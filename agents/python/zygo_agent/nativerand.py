"""Native randomness drawn before the first fork (docs/fork-safety.md, "Native randomness").

Two parts, both reported by the ``native_random`` warm-up check:

- The **guard**: ``zygo_rand.so`` (agents/native/zygo_rand.c), preloaded into a fork-mode
  zygote by the supervisor, records which shared object drew bytes from ``getrandom``,
  ``getentropy``, ``syscall(SYS_getrandom)`` or ``/dev/urandom``/``/dev/random`` from the
  start of the process until :func:`snapshot` stops it (at warm-up, before ``ready``). A
  library that keeps those bytes in its own memory hands the same ones to every forked
  request; the agent cannot reach that memory, so each such library is named with the
  mitigation (``mode = "spawn"``, or ``on_native_random = "spawn"``).
- The **known list** (:data:`KNOWN`): extension modules known to keep a generator of their
  own, looked up in ``sys.modules``; those that expose a way to reseed are reseeded in every
  child by :func:`reseed_known` (a hook of :mod:`reseed`).

Draws by the objects in :data:`HANDLED` are listed but not warned about: their state is
reseeded by the agent or drawn per call.
"""

import ctypes
import os
import re
import sys
from typing import Callable, List, NamedTuple, Optional

RECORDS_BYTES = 64 * 1024


class Draw(NamedTuple):
    """One recorded (function, library) pair: ``bytes`` drawn in ``calls`` calls.
    ``via_loader``: the call returned into ld.so (a library initialiser's tail call), so
    ``library`` is the newest loaded object, not the caller itself."""
    function: str
    bytes: int
    calls: int
    via_loader: bool
    library: str


# (pattern on the library's file name, why its draws need nothing more). Kept short: each
# entry is a library whose random state the agent reseeds in every child or that draws on
# every call.
HANDLED = [
    (re.compile(r"^libpython3[.\d]*\.so"),
     "the interpreter: random, os.urandom, secrets, hash seeds and NumPy's SeedSequence are "
     "drawn here; the agent reseeds random, NumPy and import-time generators in every child"),
    (re.compile(r"^libcrypto\.so"),
     "OpenSSL's DRBG: reseeded on fork by OpenSSL >= 1.1.1d; children of an older one "
     "(or of LibreSSL) mix in fresh OS entropy with ssl.RAND_add (the libcrypto check)"),
    (re.compile(r"^zygo_rand\.so$"), "the guard itself"),
]


class Known(NamedTuple):
    """A module known to keep a generator of its own: what it is, the source, and the
    function (if any) that reseeds it in a child (called with nothing)."""
    what: str
    source: str
    reseed: Optional[Callable[[object], Optional[Callable[[], None]]]]


def _uuid_utils_reseed(mod) -> Optional[Callable[[], None]]:
    fn = getattr(mod, "reseed_rng", None)
    return fn if callable(fn) else None


def _fastrand_reseed(mod) -> Optional[Callable[[], None]]:
    seeders = [getattr(mod, n) for n in ("pcg32_seed", "xorshift128plus_seed")
               if callable(getattr(mod, n, None))]
    if not seeders:
        return None

    def reseed() -> None:
        for seed in seeders:
            seed(int.from_bytes(os.urandom(8), "big") >> 1)
    return reseed


KNOWN = {
    "uuid_utils": Known(
        "Rust uuid crate with fast-rng: uuid4/uuid7 come from rand's ThreadRng, buffered in "
        "process memory; rand 0.9 no longer reseeds it after fork",
        "https://github.com/rust-random/rand/pull/1379", _uuid_utils_reseed),
    "fastrand": Known(
        "C PCG32 / xorshift128+ generators with one global state each (a fixed default "
        "unless seeded)", "https://pypi.org/project/fastrand", _fastrand_reseed),
    "numpy.random": Known(
        "NumPy's legacy global RandomState and Generator objects",
        "https://numpy.org/doc/stable/reference/random/parallel.html", None),
    "cryptography.hazmat.bindings._rust": Known(
        "pyca/cryptography's Rust bindings over OpenSSL: randomness from OpenSSL's DRBG",
        "https://cryptography.io/en/latest/random-numbers/", None),
}
_HANDLED_ELSEWHERE = {
    "numpy.random": "reseeded by the numpy_global and generators hooks",
    "cryptography.hazmat.bindings._rust": "OpenSSL's DRBG: see the libcrypto check",
}

_guard = None  # the preloaded zygo_rand.so, as a ctypes library; False when absent
_reseeders: List[Callable[[], None]] = []


def guard():
    """Return the preloaded guard (a ``ctypes.CDLL`` whose ``zygo_rand_*`` functions are
    set up), or ``None`` when the process was started without it."""
    global _guard
    if _guard is None:
        lib = ctypes.CDLL(None)
        try:
            lib.zygo_rand_records.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            lib.zygo_rand_records.restype = ctypes.c_int
            lib.zygo_rand_stop.argtypes = []
            lib.zygo_rand_stop.restype = None
            _guard = lib
        except AttributeError:
            _guard = False
    return _guard or None


def snapshot() -> Optional[List[Draw]]:
    """Stop the guard's recording (every interposed call passes straight through from now
    on) and return what it recorded, or ``None`` without a guard. Call once, before the
    first fork."""
    lib = guard()
    if lib is None:
        return None
    lib.zygo_rand_stop()
    buf = ctypes.create_string_buffer(RECORDS_BYTES)
    lib.zygo_rand_records(buf, RECORDS_BYTES)
    return parse_records(buf.value.decode("utf-8", "backslashreplace"))


def parse_records(text: str) -> List[Draw]:
    """Parse ``zygo_rand_records`` lines (see agents/native/zygo_rand.c). A ``dropped``
    line becomes a ``Draw`` whose function is ``dropped`` and library ``?``."""
    draws = []
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "dropped" and len(parts) == 2:
            draws.append(Draw("dropped", 0, int(parts[1]), False, "?"))
        elif len(parts) == 5:
            draws.append(Draw(parts[0], int(parts[1]), int(parts[2]), parts[3] == "1",
                              parts[4]))
    return draws


def handled_reason(library: str) -> Optional[str]:
    """Return why draws by ``library`` (a path) need nothing more, or ``None``: the
    interpreter's executable, libpython, libcrypto, the guard."""
    if library == "(main program)" or _same_file(library, sys.executable):
        return HANDLED[0][1]
    base = os.path.basename(library)
    for pattern, reason in HANDLED:
        if pattern.search(base):
            return reason
    return None


def check(handler: str) -> dict:
    """``native_random``: the shared objects that drew OS randomness before the first fork
    (``items``: function, library, bytes, calls, handled), and the known modules loaded
    (``known``: module, what, source, action). ``count`` is the number of libraries not
    handled, -1 when the guard is not loaded (cannot tell). ``handler`` names the function in the detail. Stops the guard."""
    draws = snapshot()
    known = known_modules()
    if draws is None:
        return {"name": "native_random", "level": "warn", "count": -1, "items": [],
                "known": known, "detail": (
                    "the native-randomness guard is not loaded (zygo_rand.so missing next to "
                    "the zygo binary: `make build`, which needs gcc), so native libraries that "
                    "draw OS randomness at import are not seen" + _known_words(known))}
    items = []
    for d in draws:
        reason = handled_reason(d.library) if d.function != "dropped" else None
        items.append({"function": d.function, "library": d.library, "bytes": d.bytes,
                      "calls": d.calls, "via_loader": d.via_loader, "handled": reason})
    unhandled = [i for i in items if not i["handled"]]
    libraries = sorted({i["library"] for i in unhandled})
    unknown_known = [k for k in known if k["action"].startswith("reported")]
    if not libraries and not unknown_known:
        return {"name": "native_random", "level": "info", "count": 0, "items": items[:64],
                "known": known, "detail": "no native library drew OS randomness during "
                "import (the interpreter's and OpenSSL's draws are reseeded in children)"
                + _known_words(known)}
    parts = []
    for lib in libraries:
        mine = [i for i in unhandled if i["library"] == lib]
        how = ", ".join(f"{i['function']}{' in an initialiser' if i['via_loader'] else ''}"
                        for i in mine)
        parts.append(f"{lib} drew {sum(i['bytes'] for i in mine)} byte(s) ({how})")
    detail = (f"function {handler}: " + "; ".join(parts) +
              ("; " if parts else "") + (
                  "native code drew OS randomness before the first fork; if it keeps those "
                  "bytes (a buffer, a generator's state) every forked request gets the same "
                  "ones: serve this function with mode = \"spawn\" (or on_native_random = "
                  "\"spawn\")" if parts else "") + _known_words(known))
    return {"name": "native_random", "level": "warn", "count": len(libraries),
            "items": items[:64], "known": known, "detail": detail}


def known_modules() -> List[dict]:
    """Return the :data:`KNOWN` modules present in ``sys.modules`` with what is done about
    each, and remember the reseed functions for :func:`reseed_known`."""
    out = []
    _reseeders.clear()
    for name, known in KNOWN.items():
        mod = sys.modules.get(name)
        if mod is None:
            continue
        if name in _HANDLED_ELSEWHERE:
            action = _HANDLED_ELSEWHERE[name]
        else:
            fn = known.reseed(mod) if known.reseed else None
            if fn is not None:
                _reseeders.append(fn)
                action = "reseeded in every child"
            else:
                action = "reported: this version exposes no reseed function; use mode = \"spawn\""
        out.append({"module": name, "what": known.what, "source": known.source,
                    "action": action})
    return out


def reseed_known() -> None:
    """Reseed the known modules found at warm-up (:func:`known_modules`). Returns nothing;
    raises what a module's reseed function raises."""
    for fn in _reseeders:
        fn()


def _known_words(known: List[dict]) -> str:
    if not known:
        return ""
    return "; known generators: " + ", ".join(f"{k['module']} ({k['action']})" for k in known)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
