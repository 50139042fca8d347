"""Helpers for code running inside a Zygo sandbox (standard library only).

Every copy of a sandbox -- a fork child or a rollback -- is resealed before Zygo hands it out:
a new generation at /run/zygo/generation, a new identity, fresh kernel randomness. A process
that was already running at the checkpoint wakes up in each copy with the same memory,
including its random generators. Tell it about the copy:

    import zygo_sandbox

    zygo_sandbox.auto_reseed()                  # random, NumPy, OpenSSL, uuid1, tempfile names

    @zygo_sandbox.on_new_generation
    def renew(generation, identity):            # once in every new copy
        refresh_credentials()

    def handle(request):
        zygo_sandbox.check()                    # callbacks due are done before we go on
        ...

See generation.py for the latency and reseed.py for what can and cannot be reseeded.
"""
from .generation import Watcher, check, current, default_watcher, identity, on_new_generation
from .reseed import reseed

__all__ = ["Watcher", "auto_reseed", "check", "current", "default_watcher", "identity",
           "on_new_generation", "reseed"]


def auto_reseed(*generators, all_generators=False, interval=0.1):
    """Calls reseed(*generators) once in every new copy (see reseed for what it covers)."""

    def _reseed(generation, ident):
        reseed(*generators, all_generators=all_generators)

    on_new_generation(_reseed, interval=interval)
    return _reseed
