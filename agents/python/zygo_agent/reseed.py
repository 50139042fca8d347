"""The reseed hook list (protocol rule 7).

Run in every forked child before user code and, later, by the in-sandbox agent after a
sandbox restore (case BH-02: ``os.register_at_fork`` hooks never fire on a restore), so it must
not assume a fork happened. The hooks themselves are :mod:`reseedcore`, the one copy Zygo's
three Python reseeders share (the SDK and the guest's interpreter run the same file); this
module adds what only the agent knows.

Hooks, in order: Python's global ``random``; NumPy's legacy global generator; torch's default
generator (only if torch is already imported); OpenSSL's DRBG (``ssl.RAND_add``; skipped in
a forked child when OpenSSL reseeds itself after a fork, :data:`OPENSSL_RESEEDS_AFTER_FORK`);
``uuid1``'s state; the ``tempfile`` name sequence and cached directory; generator objects created at import
without an explicit seed (those the intent recorder saw, and those warm-up registered); the
known native generators warm-up found that expose a reseed function (:mod:`nativerand`).
Unlike the sandbox reseeders, it never sweeps the heap: a generator seeded on purpose stays
deterministic, as asked.
"""

import re
from typing import List, Optional

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


def openssl_fork_problem(version: str, info) -> Optional[str]:
    """Why children of the OpenSSL of ``version`` (``ssl.OPENSSL_VERSION``) and ``info``
    (``ssl.OPENSSL_VERSION_INFO``: major, minor, fix, patch, status) are known to repeat
    ``RAND_bytes`` without help, or None: before 1.1.1d (CVE-2019-1549, fork protection off;
    1.0.x has none), and the 3.0.0 development releases (openssl/openssl#12377). The one
    place these thresholds live (the ``libcrypto`` warm-up check reports them)."""
    major, minor, fix, patch = tuple(info[:4])
    if (major, minor, fix) < (1, 1, 1) or ((major, minor, fix) == (1, 1, 1) and patch < 4):
        return "predates 1.1.1d: no reliable fork protection (CVE-2019-1549)"
    if (major, minor, fix) == (3, 0, 0) and re.search(r"alpha|beta|dev", version):
        return ("is a 3.0.0 development release whose children repeat RAND_bytes "
                "(openssl/openssl#12377)")
    return None


def openssl_reseeds_after_fork(version: str, info) -> bool:
    """Whether that OpenSSL reseeds its DRBGs from the operating system at their first use
    after a fork (a DRBG keeps the process id it was seeded in and reseeds when it
    differs): an OpenSSL with no :func:`openssl_fork_problem`, but not a 1.x development or
    beta build (``info[4]`` below 15: a 1.1.1d-dev snapshot may predate the fix) nor
    LibreSSL (not checked here)."""
    if not version.startswith("OpenSSL ") or openssl_fork_problem(version, info) is not None:
        return False
    return info[0] >= 3 or info[4] == 15  # 3.x's status is 0 for a release too


# Decided once, in the zygote (the library does not change under a forked child). When true,
# a forked child skips the ``openssl`` hook: OpenSSL renews its state from the kernel itself
# at its first draw, and the hook's ssl.RAND_add cost every child about 0.17 ms and 34
# copy-on-write faults on OpenSSL's DRBG state, used or not (BENCHMARKS, thirteenth round).
# What it relies on: a forked child's process id differs from the zygote's (no two live
# processes share one, and the sandbox's filter refuses new pid namespaces). A sandbox
# restore keeps its process id, so the reseal (reseedcore in the SDK, the guest's
# interpreter) still runs the hook.
OPENSSL_RESEEDS_AFTER_FORK = (reseedcore.ssl is not None and openssl_reseeds_after_fork(
    reseedcore.ssl.OPENSSL_VERSION, reseedcore.ssl.OPENSSL_VERSION_INFO))


def reseed_all(forked: bool = False) -> List[str]:
    """Run every reseed hook; ``forked``: this process is a child of the zygote (a fork, not
    a restore or a fresh process), so the ``openssl`` hook is skipped when
    :data:`OPENSSL_RESEEDS_AFTER_FORK`. Returns the names of the hooks that ran.

    Every hook runs even if an earlier one failed; raises ``ReseedError`` afterwards if any
    failed, so the caller can refuse to run user code with a repeated random state.
    """
    return reseedcore.reseed_all(generators=_import_time_generators, forget_tempdir=True,
                                 extra=[("native_known", nativerand.reseed_known)],
                                 skip=_OPENSSL if forked and OPENSSL_RESEEDS_AFTER_FORK else ())


_OPENSSL = ("openssl",)


def reset_tempfile() -> None:
    """Drop ``tempfile``'s name generator and cached directory, so the next name is drawn from
    a fresh generator and ``gettempdir()`` reads ``TMPDIR`` again. Returns nothing."""
    reseedcore.reset_temp_names(forget_tempdir=True)
