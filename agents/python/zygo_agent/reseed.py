"""The reseed hook list (protocol rule 7).

One list, run in every forked child before user code and, later, by the in-sandbox agent
after a sandbox restore (case BH-02: ``os.register_at_fork`` hooks never fire on a restore),
so it must not assume a fork happened. Each hook draws fresh entropy from the kernel
(``os.urandom``), which the sandbox reseal keeps distinct per clone.

Hooks, in order: Python's global ``random``; NumPy's legacy global generator; torch's default
generator (only if torch is already imported); OpenSSL's DRBG (``ssl.RAND_add``); ``uuid1``'s
state; the ``tempfile`` name sequence and cached directory; generator objects created at import
without an explicit seed (those the intent recorder saw, and those warm-up registered); the
known native generators warm-up found that expose a reseed function (:mod:`nativerand`).
"""

import _random
import os
import random
import ssl
import sys
import tempfile
import uuid
from typing import Callable, List, Tuple

from . import nativerand, recorder


class ReseedError(Exception):
    """One or more hooks failed; ``failures`` lists ``(hook name, exception)`` pairs."""

    def __init__(self, failures: List[Tuple[str, BaseException]]):
        self.failures = failures
        super().__init__("; ".join(f"{name}: {exc!r}" for name, exc in failures))


_registered: List[object] = []  # NumPy Generator / BitGenerator objects from warm-up


def register_numpy_generator(obj) -> None:
    """Reseed ``obj`` (a NumPy ``Generator`` or ``BitGenerator``, or a bare
    ``_random.Random``) in every later :func:`reseed_all`. Returns nothing."""
    _registered.append(obj)


def reseed_all() -> List[str]:
    """Run every reseed hook. Returns the names of the hooks that ran.

    Every hook runs even if an earlier one failed; raises ``ReseedError`` afterwards if any
    failed, so the caller can refuse to run user code with a repeated random state.
    """
    ran, failures = [], []
    for name, hook in _HOOKS:
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed
            failures.append((name, exc))
        else:
            ran.append(name)
    if failures:
        raise ReseedError(failures)
    return ran


def reseed_random() -> None:
    """Reseed Python's global ``random`` generator from the OS. Returns nothing."""
    random.seed()


def reseed_numpy_global() -> None:
    """Reseed NumPy's legacy global ``RandomState`` if NumPy is imported. Returns nothing."""
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()


def reseed_torch() -> None:
    """Reseed torch's default generators (CPU, and CUDA if initialised) if torch is imported.
    Returns nothing."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "seed"):
        torch.seed()


def reseed_openssl() -> None:
    """Mix 32 bytes from ``os.urandom`` into OpenSSL's DRBG (case BH-04). Returns nothing."""
    ssl.RAND_add(os.urandom(32), 32.0)


def reseed_uuid() -> None:
    """Forget ``uuid1``'s last timestamp and force its pure-Python path.

    libuuid keeps its clock sequence in process memory, out of our reach (case BH-09), so
    ``uuid._generate_time_safe`` is dropped: ``uuid1`` then draws a fresh clock sequence from
    the (reseeded) global ``random`` on every call. The hardware address is cached first, while
    libuuid can still tell it, so the pure path need not run ``ip``. Returns nothing.
    """
    if uuid._node is None and uuid._generate_time_safe is not None:
        uuid.getnode()
    uuid._generate_time_safe = None
    uuid._last_timestamp = None


def reset_tempfile() -> None:
    """Drop ``tempfile``'s name generator and cached directory, so the next name is drawn from
    a fresh generator and ``gettempdir()`` reads ``TMPDIR`` again. Returns nothing."""
    tempfile._name_sequence = None
    tempfile.tempdir = None


def reseed_import_time_generators() -> None:
    """Reseed the generator objects created at import without an explicit seed: the
    ``random.Random`` instances the intent recorder saw and the NumPy generators warm-up
    registered. Returns nothing."""
    for rng in recorder.unseeded_instances():
        rng.seed()
    for gen in _registered:
        if isinstance(gen, _random.Random):  # a bare _random.Random (no recorder hook)
            gen.seed(int.from_bytes(os.urandom(32), "big"))
            continue
        bitgen = getattr(gen, "bit_generator", gen)  # NumPy: reseed the stream itself
        bitgen.state = type(bitgen)().state


_HOOKS: List[Tuple[str, Callable[[], None]]] = [
    ("random", reseed_random),
    ("numpy_global", reseed_numpy_global),
    ("torch", reseed_torch),
    ("openssl", reseed_openssl),
    ("uuid1", reseed_uuid),
    ("tempfile", reset_tempfile),
    ("generators", reseed_import_time_generators),
    ("native_known", nativerand.reseed_known),
]
