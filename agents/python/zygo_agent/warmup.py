"""Warm-up checks (protocol start-up step 4), reported in ``ready``.

Each check returns one ``{"name", "level", "detail", ...}`` object; ``level`` is ``info`` or
``warn``, ``detail`` is one human-readable line, and extra keys carry the structured findings
(``items``, ``count``). Only ``threads`` decides ``fork_safe``. Checks only observe: they change
no state, except that :func:`run` returns the NumPy generators the children must reseed, and
``descriptors`` and ``shared_memory`` record their plans (in :mod:`fdreset` and
:mod:`sharedmem`) for the children to apply.
"""

import gc
import os
import random
import socket
import ssl
import sys
import threading
import uuid
from collections import Counter
from typing import List, NamedTuple, Optional, Tuple

from . import fdreset, libc, nativerand, recorder, reseed, sharedmem

MAX_ITEMS = 64


class Report(NamedTuple):
    """Result of :func:`run`: the ``checks`` list for ``ready``, whether forking is safe,
    and the NumPy generator objects to reseed in every child."""
    checks: List[dict]
    fork_safe: bool
    numpy_generators: List[object]


def run(code_dir: str, agent_fds: Tuple[int, ...] = (), mode: str = "fork",
        handler: str = "") -> Report:
    """Run every check. ``code_dir`` selects the user's modules (those whose ``__file__`` is
    under it); ``agent_fds`` are the agent's own descriptors, left out of ``sockets``;
    ``mode`` (``fork`` or ``spawn``) is the agent's, for ``landlock`` and ``native_random``;
    ``handler`` (``module:function``) names the function in ``native_random``, which also
    stops the native-randomness guard's recording.

    Returns a ``Report``; never raises: a check that fails is reported as ``warn`` with the
    error, and a failed ``threads`` check makes ``fork_safe`` false (fail closed).
    """
    numpy_generators: List[object] = []

    def generators() -> dict:
        check, found = check_generators(code_dir)
        numpy_generators.extend(found)
        return check

    checks = [_guarded(name, fn) for name, fn in (
        ("threads", check_threads), ("generators", generators),
        ("sockets", lambda: check_sockets(agent_fds, code_dir)), ("uuid1", check_uuid1),
        ("numpy_global", check_numpy_global), ("libcrypto", check_libcrypto),
        ("asyncio_loop", lambda: check_asyncio_loop(code_dir)),
        ("landlock", lambda: check_landlock(mode)),
        ("native_random", lambda: check_native_random(mode, handler)),
        ("descriptors", lambda: check_descriptors(agent_fds, mode)),
        ("processes", check_processes), ("shared_memory", lambda: check_shared_memory(mode)))]
    return Report(checks, checks[0].get("count") == 1, numpy_generators)


def _guarded(name: str, check) -> dict:
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a broken check must not stop the zygote
        return _check(name, "warn", f"the check failed: {type(exc).__name__}: {exc}")


def one_thread() -> bool:
    """Return True if the process has exactly one thread, from one ``stat`` of
    ``/proc/self/task``: Linux's procfs gives that directory a link count of 2 plus the
    number of threads (``proc_task_getattr``). False means more threads or a link count
    that says nothing (another procfs): the caller then lists the directory. Raises
    ``OSError`` if it cannot be stat'ed."""
    return os.stat("/proc/self/task").st_nlink == 3


def thread_problem() -> Optional[str]:
    """Return ``None`` if the process has one thread (``/proc/self/task``), else a sentence
    naming the others (or saying why they cannot be counted); used right before every fork.
    The common case, one thread, returns at once (:func:`one_thread`: one system call): the
    zygote runs this before every fork, and what it touches after the previous fork is
    copy-on-write faults; the full check (the names of the threads) runs only when there is
    something to name."""
    try:
        if one_thread() or len(os.listdir("/proc/self/task")) == 1:
            return None
        check = check_threads()
    except Exception as exc:  # noqa: BLE001 - cannot tell: do not fork
        return f"cannot count threads: {type(exc).__name__}: {exc}"
    return None if check["count"] == 1 else check["detail"]


def check_threads() -> dict:
    """``threads``: the Python and native threads alive besides the main one."""
    pid = os.getpid()
    python_names = {t.native_id: t.name for t in threading.enumerate()
                    if t is not threading.main_thread()}
    items = []
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        if tid != pid:
            items.append({"tid": tid, "comm": _read_comm(tid), "python": python_names.get(tid)})
    if not items:
        return _check("threads", "info", "1 thread (the main one)", count=1, items=[])
    named = [f"{i['python']} (Python)" for i in items if i["python"]]
    native = Counter(i["comm"] for i in items if not i["python"])
    named += [f"{comm} x{n} (native)" for comm, n in sorted(native.items())]
    detail = (f"{len(items)} thread(s) alive besides the main one: {', '.join(named)}; "
              "forking now could deadlock the children, so this function needs spawn mode")
    return _check("threads", "warn", detail, count=len(items) + 1, items=items[:MAX_ITEMS])


def check_generators(code_dir: str) -> Tuple[dict, List[object]]:
    """``generators``: random generator objects in the user's module globals.

    Returns the check and the NumPy generators to reseed. ``random.Random`` explicitness
    comes from the intent recorder. For a NumPy ``Generator`` or ``BitGenerator`` the
    heuristic is its ``SeedSequence``: an integer entropy below 2**64 (or a sequence of
    integers) was given by the user, since OS entropy is a 128-bit draw (below 2**64 with
    probability 2**-64); a user seed of 2**64 or more is therefore mistaken for OS entropy.
    A NumPy ``RandomState`` keeps no trace of its seeding: it is named and left alone.
    """
    items, to_reseed, seen = [], [], set()
    for module_name, module in _user_modules(code_dir):
        for name, obj in list(vars(module).items()):
            found = _classify_generator(obj)
            if found is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            kind, explicit, reseeded = found
            items.append({"name": f"{module_name}.{name}", "kind": kind,
                          "explicit_seed": explicit, "reseeded": reseeded})
            if reseeded and kind.startswith("numpy."):
                to_reseed.append(obj)
    swept = _sweep_generators(seen)
    for obj, kind, explicit in swept:
        items.append({"name": f"<{kind} held outside module globals>", "kind": kind,
                      "explicit_seed": explicit, "reseeded": explicit is not True})
        if explicit is not True:
            to_reseed.append(obj)
    others = len([r for r in recorder.unseeded_instances() if id(r) not in seen])
    return _generators_check(items, others), to_reseed


def _sweep_generators(seen: set) -> List[Tuple[object, str, Optional[bool]]]:
    """Find the generators that module globals do not hold — in a dict, a class attribute,
    a closure, a cache, a default argument — by walking every object the garbage collector
    tracks and what those refer to. Returns ``(object, kind, explicit seed?)`` for NumPy
    ``Generator``/``BitGenerator`` objects and bare ``_random.Random`` objects (the
    ``random.Random`` subclass is already covered by the intent recorder, wherever it lives).
    ``seen`` holds the ids already reported; it is updated."""
    import _random
    np_random = sys.modules.get("numpy.random")
    np_types = (np_random.Generator, np_random.BitGenerator) if np_random else ()
    found = []
    # NumPy's global RandomState and the MT19937 it draws from: reseeded by the reseed's
    # numpy_global hook (legacy seeding of that MT19937). Registered here too, the bit
    # generator was reseeded a second time in every child, through a new MT19937 and its
    # SeedSequence: 0.5 of the reseed's 0.9 ms after GO in the sandbox (fifth round).
    legacy = getattr(getattr(np_random, "mtrand", None), "_rand", None)
    legacy_bitgen = getattr(legacy, "_bit_generator", None)

    def consider(obj) -> None:
        if id(obj) in seen:
            return
        if type(obj) is _random.Random:
            seen.add(id(obj))
            found.append((obj, "_random.Random", None))
        elif np_types and isinstance(obj, np_types):
            if obj is legacy or obj is legacy_bitgen:  # the numpy_global hook reseeds it
                return
            seen.add(id(obj))
            explicit = _numpy_seed_explicit(obj, np_random)
            found.append((obj, "numpy.random." + type(obj).__name__, explicit))

    for obj in gc.get_objects():
        consider(obj)
        for ref in gc.get_referents(obj):
            if not gc.is_tracked(ref):
                consider(ref)
    # A Generator and its BitGenerator are one stream: reseed it once.
    bitgens = {id(getattr(o, "bit_generator", None)) for o, _, _ in found}
    return [f for f in found if id(f[0]) not in bitgens][:64]


def _socket_owners(code_dir: Optional[str]) -> dict:
    """Map fd -> names like ``main.LISTENER`` or ``main.CLIENT.sock``: the user's module
    globals (and their attributes, one level down) that hold a socket object."""
    owners: dict = {}
    if not code_dir:
        return owners

    def note(obj, name):
        if isinstance(obj, socket.socket):
            try:
                owners.setdefault(obj.fileno(), []).append(name)
            except OSError:
                pass

    for mname, mod in _user_modules(code_dir):
        for gname, obj in list(vars(mod).items()):
            if gname.startswith("__"):
                continue
            note(obj, f"{mname}.{gname}")
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict) and not isinstance(obj, type):
                for aname, aval in list(attrs.items()):
                    note(aval, f"{mname}.{gname}.{aname}")
    return owners


def check_sockets(agent_fds: Tuple[int, ...] = (), code_dir: Optional[str] = None) -> dict:
    """``sockets``: sockets open after import (fd, family, type, local and peer address, and
    the user's globals that hold them)."""
    owners = _socket_owners(code_dir)
    items = []
    for fd, target in fdreset.open_fds():
        if fd in agent_fds or fdreset.kind_of(target) != "socket":
            continue
        try:
            info = fdreset.probe_socket(fd)
        except OSError:
            continue
        items.append({"fd": fd, "family": _enum_name(info.family, socket.AddressFamily),
                      "type": _enum_name(info.type, socket.SocketKind),
                      "local": _address(info.local), "peer": _address(info.peer),
                      "held_by": owners.get(fd, [])})
    if not items:
        return _check("sockets", "info", "no sockets open at import", items=[])
    listed = ", ".join(
        f"fd {i['fd']} {i['family']} {i['local']} -> {i['peer']}"
        + (f" (held by {', '.join(i['held_by'])})" if i["held_by"] else "") for i in items)
    detail = (f"{len(items)} socket(s) open at import: {listed}; each child gets an "
              "unconnected socket in their place and must reconnect")
    return _check("sockets", "warn", detail, items=items[:MAX_ITEMS])


def check_uuid1() -> dict:
    """``uuid1``: whether ``uuid.uuid1`` was called during import."""
    calls = recorder.uuid1_calls()
    if calls == 0 and uuid._last_timestamp is None:
        return _check("uuid1", "info", "uuid.uuid1 was not called during import", calls=0)
    detail = (f"uuid.uuid1 was called during import ({calls} time(s)); children reset its "
              "state and draw a fresh clock sequence, but time-based UUIDs from siblings can "
              "still collide in other libraries (libuuid): prefer uuid.uuid4")
    return _check("uuid1", "warn", detail, calls=calls)


def check_numpy_global() -> dict:
    """``numpy_global``: whether NumPy's legacy global generator was drawn from at import.

    Heuristic: a freshly seeded legacy MT19937 sits at key position 623 (seeded from the OS)
    or 624 (seeded with a value) with no cached Gaussian; any other state means draws were
    made (blind spot: draws that end exactly on those positions).
    """
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return _check("numpy_global", "info", "NumPy is not imported", used=False)
    state = np_random.get_state()
    used = state[2] not in (623, 624) or bool(state[3])
    if not used:
        return _check("numpy_global", "info",
                      "the NumPy global generator was not used during import", used=False)
    return _check("numpy_global", "warn",
                  "the NumPy global generator was used during import; every child reseeds it "
                  "(np.random.seed()) before the handler runs", used=True)


def check_libcrypto() -> dict:
    """``libcrypto``: the OpenSSL version, ``warn`` on versions known to repeat
    ``RAND_bytes`` across fork."""
    level, detail = libcrypto_verdict(ssl.OPENSSL_VERSION, ssl.OPENSSL_VERSION_INFO)
    return _check("libcrypto", level, detail, version=ssl.OPENSSL_VERSION)


def libcrypto_verdict(version: str, info: Tuple[int, ...]) -> Tuple[str, str]:
    """Return ``(level, detail)`` for an OpenSSL ``version`` string and its
    ``OPENSSL_VERSION_INFO`` tuple ``(major, minor, fix, patch, status)``.

    Known bad: :func:`reseed.openssl_fork_problem` (before 1.1.1d, the 3.0.0 development
    releases). Children of those, and of LibreSSL, mix fresh OS entropy in with ``ssl.RAND_add``; any
    other OpenSSL reseeds itself from the OS at its first draw after the fork, and children
    skip it (:func:`reseed.openssl_reseeds_after_fork` decides).
    """
    if version.startswith("LibreSSL"):
        return "info", f"{version} (children also mix in OS entropy with ssl.RAND_add)"
    problem = reseed.openssl_fork_problem(version, info)
    if problem is not None:
        return "warn", (f"{version} {problem}; children mix in OS entropy with ssl.RAND_add, "
                        "upgrade libcrypto")
    if reseed.openssl_reseeds_after_fork(version, info):
        return "info", (f"{version} (reseeds its generators from the OS at their first use "
                        "after a fork)")
    return "info", f"{version} (children also mix in OS entropy with ssl.RAND_add)"


def check_asyncio_loop(code_dir: str) -> dict:
    """``asyncio_loop``: an event loop set as current at import, or held in user globals."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return _check("asyncio_loop", "info", "asyncio is not imported", items=[])
    policy = asyncio.events._event_loop_policy
    current = getattr(getattr(policy, "_local", None), "_loop", None) if policy else None
    items = []
    if current is not None:
        items.append({"name": "current event loop", "loop": repr(current)})
    for module_name, module in _user_modules(code_dir):
        for name, obj in list(vars(module).items()):
            if isinstance(obj, asyncio.AbstractEventLoop) and obj is not current:
                items.append({"name": f"{module_name}.{name}", "loop": repr(obj)})
    if not items:
        return _check("asyncio_loop", "info", "no event loop set at import", items=[])
    names = ", ".join(i["name"] for i in items)
    return _check("asyncio_loop", "warn",
                  f"event loop(s) created at import ({names}); children never run them: their "
                  "epoll descriptors are replaced and the loop policy is reset",
                  items=items[:MAX_ITEMS])


def check_landlock(mode: str, abi: Optional[int] = None) -> dict:
    """``landlock``: whether each forked request can get a Landlock domain of its own
    (ABI 6 or later: Linux 6.12, with ``landlock`` in the boot's ``lsm=`` list). ``abi``
    overrides the kernel's answer (for tests)."""
    if abi is None:
        abi = libc.landlock_abi()
    if mode != "fork":
        return _check("landlock", "info", f"Landlock ABI {abi}; not used in {mode} mode: each "
                      "request is alone in its sandbox's pid namespace", abi=abi, scoped=False)
    if abi >= libc.LANDLOCK_SCOPED_ABI:
        return _check("landlock", "info", f"Landlock ABI {abi}: each request runs in a domain "
                      "of its own (no ptrace-class access, signals or abstract unix socket "
                      "connections to the zygote, its other children or what they exec)",
                      abi=abi, scoped=True)
    have = f"Landlock ABI {abi}" if abi else "no Landlock"
    return _check("landlock", "warn", f"{have} (scoping needs ABI 6: Linux 6.12 with landlock "
                  "in lsm=): requests are not scoped from one another: a request can signal "
                  "the zygote and its other children, reach what another request execs "
                  "(/proc/PID/mem: exec makes a process dumpable again) and connect to its "
                  "abstract unix sockets", abi=abi, scoped=False)


def check_native_random(mode: str, handler: str) -> dict:
    """``native_random``: native libraries that drew OS randomness before the first fork
    (the preloaded guard's records) and known native generators (:mod:`nativerand`). In
    spawn mode every request is a fresh interpreter: nothing is shared, nothing to check."""
    if mode != "fork":
        return _check("native_random", "info", f"not checked in {mode} mode: every request "
                      "imports its native libraries afresh", count=0, items=[], known=[])
    check = nativerand.check(handler)
    check["detail"] = check["detail"][:2048]
    return check


def check_descriptors(agent_fds: Tuple[int, ...] = (), mode: str = "fork") -> dict:
    """``descriptors``: every descriptor open after import (fd, kind, target) and what each
    child does with it (:func:`fdreset.plan_inherited`, the plan the children apply). The
    agent's ``agent_fds`` are listed as closed in each child. In spawn mode nothing is done."""
    plan = fdreset.plan_inherited(skip=agent_fds)
    items = [{"fd": fd, "kind": "agent", "target": "the control socket",
              "action": "closed in each child"} for fd in agent_fds]
    for e in plan:
        action = e.describe() if mode == "fork" else "kept: this process serves one request"
        items.append({"fd": e.fd, "kind": e.kind, "target": e.target, "action": action,
                      "policy": e.action, "shared_content": e.shared_content})
    items.sort(key=lambda i: i["fd"])
    listed = "; ".join(f"fd {i['fd']} {i['kind']} {i['target']}: {i['action']}" for i in items)
    worth = [i for i in items if i.get("policy") not in (None, "keep", "agent")]
    level = "warn" if mode == "fork" and any(i.get("shared_content") for i in items) else "info"
    detail = (f"{len(items)} descriptor(s) open after import, {len(worth)} made private to "
              f"each request: {listed}" if mode == "fork" else
              f"{len(items)} descriptor(s) open after import, left as they are ({mode} mode): "
              f"{listed}")
    return _check("descriptors", level, detail, items=items[:MAX_ITEMS])


def check_processes() -> dict:
    """``processes``: processes the import started (children of the agent), with the
    descriptors that connect the agent to them (pipes, sockets and pty slaves both hold)."""
    me = os.getpid()
    mine = {}
    for fd, target in fdreset.open_fds():
        # 1, 2: the agent's; a pty master has no name its peer's slave shares
        if fd not in (1, 2) and target.startswith(("pipe:", "socket:", "/dev/pts/")):
            mine.setdefault(target, []).append(fd)
    items = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or _ppid(int(name)) != me:
            continue
        pid = int(name)
        shared = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                shared.update(mine.get(os.readlink(f"/proc/{pid}/fd/{fd}"), []))
        except OSError:
            pass
        items.append({"pid": pid, "cmdline": _cmdline(pid), "fds": sorted(shared)})
    if not items:
        return _check("processes", "info", "no process started at import", items=[])
    listed = "; ".join(
        f"pid {i['pid']} ({i['cmdline']}), connected by fd {', '.join(map(str, i['fds']))}"
        if i["fds"] else f"pid {i['pid']} ({i['cmdline']})" for i in items)
    detail = (f"{len(items)} process(es) started at import: {listed}; they belong to the "
              "zygote: each child's descriptors to them are replaced (see descriptors), so "
              "a request cannot talk to them through those; it must start its own")
    return _check("processes", "warn", detail, items=items[:MAX_ITEMS])


def check_shared_memory(mode: str = "fork") -> dict:
    """``shared_memory``: ``MAP_SHARED`` mappings that may be written (anonymous,
    ``multiprocessing``, ``shared_memory``, memfd, System V, files), and whether each child
    gets a private copy (:func:`sharedmem.plan_shared`)."""
    regions = sharedmem.plan_shared()
    items = [{"start": hex(r.start), "size": r.size, "perms": r.perms, "backing": r.backing,
              "private": r.private and mode == "fork"} for r in regions]
    if not items:
        return _check("shared_memory", "info", "no writable shared mapping", items=[])
    what = {True: "private copy in each child",
            False: "kept shared: a file every request can open anyway"}
    listed = "; ".join(f"{i['backing'] or '[anonymous]'} {i['size']} bytes {i['perms']}: "
                       + (what[r.private] if mode == "fork" else f"kept ({mode} mode)")
                       for i, r in zip(items, regions))
    level = "warn" if any(not r.private for r in regions) and mode == "fork" else "info"
    return _check("shared_memory", level, f"{len(items)} writable shared mapping(s): {listed}",
                  items=items[:MAX_ITEMS])


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(512).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return "?"


def _check(name: str, level: str, detail: str, **extra) -> dict:
    return {"name": name, "level": level, "detail": detail[:2048], **extra}


def _generators_check(items: List[dict], others: int) -> dict:
    shared = [i for i in items if not i["reseeded"] and i["kind"] != "random.SystemRandom"]
    parts = [f"{i['name']} ({i['kind']}, {_seed_words(i)})" for i in items]
    if others:
        parts.append(f"{others} other random.Random instance(s) created during import "
                     "without a seed (reseeded in children)")
    detail = "; ".join(parts) if parts else "no generator objects in the user's module globals"
    if shared:
        detail += ("; the generators not reseeded produce the same stream in every child: "
                   "seed them per request if that is not intended")
    return _check("generators", "warn" if shared else "info", detail,
                  items=items[:MAX_ITEMS], others=others)


def _seed_words(item: dict) -> str:
    if item["kind"] == "random.SystemRandom":
        return "reads the OS on every call, nothing to reseed"
    if item["kind"] == "numpy.random.RandomState":
        return "cannot tell whether it was seeded explicitly; not reseeded"
    seeded = {True: "seeded explicitly", False: "not seeded explicitly",
              None: "seeding unknown"}[item["explicit_seed"]]
    return seeded + (", reseeded in children" if item["reseeded"] else ", not reseeded")


def _classify_generator(obj) -> Optional[Tuple[str, Optional[bool], bool]]:
    """Return ``(kind, explicit seed?, reseeded in children?)`` or ``None``."""
    if isinstance(obj, random.SystemRandom):
        return "random.SystemRandom", None, False
    if isinstance(obj, random.Random):
        if obj is random._inst:
            return "random (global)", None, True
        explicit = recorder.explicit_seed(obj)
        return "random.Random", explicit, explicit is False
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return None
    if obj is np_random.mtrand._rand:
        return "numpy.random (global RandomState)", None, True
    if isinstance(obj, np_random.RandomState):
        return "numpy.random.RandomState", None, False
    if isinstance(obj, (np_random.Generator, np_random.BitGenerator)):
        explicit = _numpy_seed_explicit(obj, np_random)
        kind = "numpy.random." + type(obj).__name__
        return kind, explicit, explicit is False
    return None


def _numpy_seed_explicit(obj, np_random) -> Optional[bool]:
    bitgen = getattr(obj, "bit_generator", obj)
    seq = getattr(bitgen, "seed_seq", None) or getattr(bitgen, "_seed_seq", None)
    if not isinstance(seq, np_random.SeedSequence):
        return None
    entropy = seq.entropy
    if isinstance(entropy, int):
        return entropy < 2 ** 64
    return True  # a sequence of integers was given


def _user_modules(code_dir: str):
    root = os.path.realpath(code_dir)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and _is_under(os.path.realpath(path), root):
            yield name, module


def _is_under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False


def _read_comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _enum_name(value: int, enum) -> str:
    try:
        return enum(value).name
    except ValueError:
        return str(value)


def _address(addr) -> Optional[str]:
    if addr is None:
        return None
    if isinstance(addr, tuple) and len(addr) >= 2:
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    if isinstance(addr, bytes):
        return "@" + addr[1:].decode("utf-8", "backslashreplace") if addr[:1] == b"\0" \
            else addr.decode("utf-8", "backslashreplace")
    return str(addr) if addr != "" else ""
