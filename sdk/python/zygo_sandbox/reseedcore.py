"""Reseed this process's in-memory random generators from the kernel: Zygo's one copy.

A forked child, a restored sandbox and a sandbox clone all wake up with the memory of the
process they were copied from, generators included; the kernel's own randomness
(``os.urandom``) already differs per copy. :func:`reseed_all` renews what lives in this
process's memory and nothing outside it.

This file is the only implementation, used by three consumers:

- the function agent (``agents/python/zygo_agent/reseed.py`` adds its own hooks);
- the in-sandbox SDK (``sdk/python/zygo_sandbox/reseedcore.py`` is a byte-for-byte copy,
  written by ``go generate ./agents``; ``TestSDKReseedCoreIsTheAgents`` fails on a drift);
- the guest's code interpreter (``internal/guest/interp.py``), which gets this source from
  ``agents.ReseedCorePy`` (go:embed) and runs it as a module.

So it is standard-library only, imports nothing relative, runs on Python 3.6 and later, and
must not assume a fork happened. The tests are ``agents/python/tests/test_reseedcore.py``.

Hooks, in order, each given an :class:`Entropy`: ``random`` (the module's global generator),
``numpy_global`` (NumPy's legacy global state, if ``numpy.random`` is imported), ``torch``
(its default generators, if imported), ``openssl`` (``ssl.RAND_add`` into the process's DRBG),
``uuid1`` (its clock sequence and last timestamp), ``tempfile`` (the name sequence; with
``forget_tempdir`` the cached directory too), ``generators`` (generator objects: those passed,
and with ``all_generators`` every one the garbage collector can reach), then the caller's
extra hooks.
"""

import _random
import gc
import hashlib
import os
import random
import sys
import tempfile
import uuid

try:
    import ssl
except ImportError:  # a Python built without OpenSSL has no DRBG of its own to reseed
    ssl = None

__all__ = ["Entropy", "ReseedError", "reachable_generators", "reseed_all", "reseed_object",
           "reset_temp_names"]


class ReseedError(Exception):
    """One or more hooks failed; ``failures`` lists ``(hook name, exception)`` pairs."""

    def __init__(self, failures):
        self.failures = failures
        super().__init__("; ".join("%s: %r" % (name, exc) for name, exc in failures))


class Entropy:
    """Where the hooks' seeds come from: ``os.urandom``, or, given ``seed`` (bytes from
    outside the process, such as the host's at a sandbox reseal), SHA-256 blocks of ``seed``,
    32 bytes of ``os.urandom`` drawn once, and a counter: a copy whose kernel randomness was
    somehow shared still differs by its seed, and the other way round.

    Without a seed, ``ahead`` bytes of ``os.urandom`` are drawn at once and handed out in
    order, each byte once, so the hooks' draws cost one system call instead of one each;
    past them every draw is its own ``os.urandom``."""

    def __init__(self, seed=b"", ahead=0):
        self._material = bytes(seed) + os.urandom(32) if seed else None
        self._counter = 0
        self._ahead = os.urandom(ahead) if ahead and not seed else b""
        self._used = 0

    def draw(self, n):
        """``n`` fresh bytes."""
        if self._material is None:
            end = self._used + n
            if end <= len(self._ahead):
                out = self._ahead[self._used:end]
                self._used = end
                return out
            return os.urandom(n)
        out = b""
        while len(out) < n:
            self._counter += 1
            out += hashlib.sha256(self._material + self._counter.to_bytes(8, "little")).digest()
        return out[:n]

    def integer(self, nbytes):
        """A non-negative int of ``nbytes`` fresh bytes."""
        return int.from_bytes(self.draw(nbytes), "little")

    def words(self, n):
        """``n`` fresh 32-bit words (a NumPy ``RandomState`` seed)."""
        b = self.draw(4 * n)
        return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b), 4)]


def _numpy_random():
    """``numpy.random`` if it is imported (it holds every NumPy generator type), else None."""
    return sys.modules.get("numpy.random")


def reseed_object(obj, entropy=None):
    """Reseed one generator object: a ``random.Random`` (or a bare ``_random.Random``), a NumPy
    ``Generator``, ``BitGenerator`` or ``RandomState``. Raises ``TypeError`` for anything else."""
    entropy = entropy or Entropy()
    npr = _numpy_random()
    if isinstance(obj, random.Random):
        obj.seed(entropy.draw(32))
    elif isinstance(obj, _random.Random):  # C type: seed() takes an int (bytes would be hashed)
        obj.seed(entropy.integer(32))
    elif npr is not None and isinstance(obj, npr.RandomState):
        obj.seed(entropy.words(8))
    elif npr is not None and isinstance(obj, (npr.Generator, npr.BitGenerator)):
        bitgen = getattr(obj, "bit_generator", obj)  # a Generator and its BitGenerator: one stream
        bitgen.state = type(bitgen)(entropy.integer(32)).state
    else:
        raise TypeError("cannot reseed %r" % (obj,))


def reachable_generators():
    """Every generator object the garbage collector can reach (``random.Random`` other than the
    module's own, NumPy ``Generator`` and ``RandomState``), including ones seeded on purpose."""
    npr = _numpy_random()
    kinds = (random.Random,) if npr is None else (random.Random, npr.Generator, npr.RandomState)
    return [o for o in gc.get_objects() if isinstance(o, kinds) and o is not random._inst]


# Every hook is called as hook(entropy, options), options being reseed_all's
# (generators, all_generators, forget_tempdir): one table, no closure made per call.


def _random_global(entropy, options):
    random.seed(entropy.draw(32))


# The legacy global generator's state: MT19937's 624 32-bit words.
_MT19937_WORDS = 624


def _numpy_global(entropy, options):
    # A whole fresh MT19937 key, set directly (position 624: the next draw regenerates the
    # block; the 3-tuple form also drops a cached Gaussian), rather than seed() of a few words,
    # which takes NumPy's array conversion and ufunc checks: in a forked child their first use
    # touched about 150 pages of the zygote's (copy-on-write faults, sixth round of
    # docs/BENCHMARKS.md), set_state about 60. Older NumPy without set_state: seed().
    npr = _numpy_random()
    if npr is None:
        return
    np = sys.modules.get("numpy")
    if np is not None and hasattr(npr, "set_state"):
        key = np.frombuffer(entropy.draw(4 * _MT19937_WORDS), dtype="<u4")
        npr.set_state(("MT19937", key, _MT19937_WORDS))
    elif hasattr(npr, "seed"):
        npr.seed(entropy.words(8))


def _torch(entropy, options):
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):  # CPU, and CUDA if initialised
        torch.manual_seed(entropy.integer(8) >> 1)


def _openssl(entropy, options):
    # OpenSSL >= 1.1.1d reseeds its DRBG on fork, but not on a sandbox restore (case BH-04).
    if ssl is not None:
        ssl.RAND_add(entropy.draw(32), 32.0)


def _uuid1(entropy, options):
    # libuuid keeps its clock sequence in process memory, out of our reach (case BH-09), so its
    # path is dropped: uuid1 then draws a fresh clock sequence from the (reseeded) global random
    # on every call. The hardware address is cached first, while libuuid can still tell it, so
    # the pure path need not run `ip`.
    if getattr(uuid, "_node", 0) is None and getattr(uuid, "_generate_time_safe", None) is not None:
        uuid.getnode()
    if hasattr(uuid, "_generate_time_safe"):
        uuid._generate_time_safe = None
    uuid._last_timestamp = None


def reset_temp_names(forget_tempdir=False):
    """Drop ``tempfile``'s name generator, so the next name is drawn from a fresh, OS-seeded
    one; with ``forget_tempdir`` also its cached directory, so ``gettempdir()`` reads
    ``TMPDIR`` again. Returns nothing."""
    tempfile._name_sequence = None
    if forget_tempdir:
        tempfile.tempdir = None


def _tempfile(entropy, options):
    reset_temp_names(options[2])


def _generators(entropy, options):
    generators, all_generators = options[0], options[1]
    objs = generators() if callable(generators) else generators
    for obj in objs:
        reseed_object(obj, entropy)
    if all_generators:
        for obj in reachable_generators():
            try:
                reseed_object(obj, entropy)
            except Exception:  # noqa: BLE001 - a subclass whose seed() refuses: not ours
                pass


_HOOKS = (
    ("random", _random_global),
    ("numpy_global", _numpy_global),
    ("torch", _torch),
    ("openssl", _openssl),
    ("uuid1", _uuid1),
    ("tempfile", _tempfile),
    ("generators", _generators),
)


def reseed_all(generators=(), all_generators=False, extra=(), seed=b"", forget_tempdir=False,
               skip=()):
    """Run every hook (module doc) but those named in ``skip`` and return the names of those
    that ran.

    ``generators`` is an iterable of generator objects, or a callable returning one at reseed
    time; with ``all_generators`` every generator the garbage collector reaches is reseeded too
    (one that cannot be is skipped). ``extra`` is a list of ``(name, callable)`` run last, with
    no arguments. ``seed`` is mixed into every hook's seed (:class:`Entropy`).
    ``forget_tempdir`` also drops ``tempfile``'s cached directory (for a caller that has just
    changed ``TMPDIR``; it would undo a ``tempfile.tempdir`` the program set itself).
    ``skip`` is for a caller that knows a hook's state is renewed without it (the function
    agent's forked child skips ``openssl`` when OpenSSL reseeds itself after a fork).

    Every hook runs even if an earlier one failed; raises :class:`ReseedError` afterwards if
    any failed, so the caller can refuse to go on with a repeated random state.
    """
    # What the hooks below draw, at once: random's 32 bytes, NumPy's key, OpenSSL's 32, and
    # one generator object's 32 (more come one draw each).
    ahead = 3 * 32 + (4 * _MT19937_WORDS if _numpy_random() is not None else 0)
    entropy = Entropy(seed, ahead)
    options = (generators, all_generators, forget_tempdir)
    ran, failures = [], []
    for name, hook in _HOOKS:
        if name in skip:
            continue
        try:
            hook(entropy, options)
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed
            failures.append((name, exc))
        else:
            ran.append(name)
    for name, hook in extra:
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed
            failures.append((name, exc))
        else:
            ran.append(name)
    if failures:
        raise ReseedError(failures)
    return ran
