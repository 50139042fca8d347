"""The reseed hook list (protocol rule 7).

Run in every forked child before user code and, later, by the in-sandbox agent after a
sandbox restore (case BH-02: ``os.register_at_fork`` hooks never fire on a restore), so it must
not assume a fork happened. The hooks themselves are :mod:`reseedcore`, the one copy Zygo's
three Python reseeders share (the SDK and the guest's interpreter run the same file); this
module adds what only the agent knows.

Hooks, in order: Python's global ``random``; NumPy's legacy global generator; torch's default
generator (only if torch is already imported); OpenSSL's DRBG (``ssl.RAND_add``); ``uuid1``'s
state; the ``tempfile`` name sequence and cached directory; generator objects created at import
without an explicit seed (those the intent recorder saw, and those warm-up registered); the
known native generators warm-up found that expose a reseed function (:mod:`nativerand`).
Unlike the sandbox reseeders, it never sweeps the heap: a generator seeded on purpose stays
deterministic, as asked.
"""

from typing import List

from . import nativerand, recorder, reseedcore

ReseedError = reseedcore.ReseedError  # ``failures`` lists ``(hook name, exception)`` pairs

_registered: List[object] = []  # NumPy Generator / BitGenerator objects from warm-up


def register_numpy_generator(obj) -> None:
    """Reseed ``obj`` (a NumPy ``Generator`` or ``BitGenerator``, or a bare
    ``_random.Random``) in every later :func:`reseed_all`. Returns nothing."""
    _registered.append(obj)


def _import_time_generators() -> List[object]:
    """The ``random.Random`` instances the intent recorder saw made without a seed, and the
    generators warm-up registered."""
    return list(recorder.unseeded_instances()) + _registered


def reseed_all() -> List[str]:
    """Run every reseed hook. Returns the names of the hooks that ran.

    Every hook runs even if an earlier one failed; raises ``ReseedError`` afterwards if any
    failed, so the caller can refuse to run user code with a repeated random state.
    """
    return reseedcore.reseed_all(generators=_import_time_generators, forget_tempdir=True,
                                 extra=[("native_known", nativerand.reseed_known)])


def reset_tempfile() -> None:
    """Drop ``tempfile``'s name generator and cached directory, so the next name is drawn from
    a fresh generator and ``gettempdir()`` reads ``TMPDIR`` again. Returns nothing."""
    reseedcore.reset_temp_names(forget_tempdir=True)
