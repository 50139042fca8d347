"""The intent recorder (protocol start-up step 2).

Installed before the user's module is imported, it wraps ``random.Random.__init__``,
``seed`` and ``setstate`` to note, per instance, whether the generator was given an explicit
seed or state, and wraps ``uuid.uuid1`` to count calls. Warm-up reads these notes; the reseed
hooks use them to leave explicitly seeded generators alone (their owner asked for a fixed
stream) and to reseed the others in every child.

Recording stops at the end of warm-up (:func:`stop`): later calls go straight through.
"""

import random
import uuid
import weakref
from typing import List, Optional

_explicit = weakref.WeakKeyDictionary()  # random.Random instance -> bool (explicit seed?)
_recording = False
_uuid1_calls = 0
_installed = False


def install() -> None:
    """Wrap the ``random.Random`` seeding methods and ``uuid.uuid1``, and start recording.

    Returns nothing. Idempotent: a second call only restarts recording.
    """
    global _recording, _installed
    _recording = True
    if _installed:
        return
    _installed = True
    _wrap_random(random.Random)
    _wrap_uuid1()


def stop() -> None:
    """Stop recording; the wrappers stay in place but only call through. Returns nothing."""
    global _recording
    _recording = False


def explicit_seed(rng: random.Random) -> Optional[bool]:
    """Return whether ``rng`` was seeded explicitly while recording: ``True`` (a seed value
    or a state was given), ``False`` (seeded from the OS), or ``None`` (never seen)."""
    try:
        return _explicit.get(rng)
    except TypeError:
        return None


def unseeded_instances() -> List[random.Random]:
    """Return the live ``random.Random`` instances created while recording that were seeded
    from the OS, excluding ``SystemRandom`` (which has no state)."""
    return [rng for rng, explicit in list(_explicit.items())
            if explicit is False and not isinstance(rng, random.SystemRandom)]


def uuid1_calls() -> int:
    """Return how many times ``uuid.uuid1`` was called while recording."""
    return _uuid1_calls


def _note(rng, explicit: bool) -> None:
    if not _recording:
        return
    try:
        _explicit[rng] = explicit
    except TypeError:  # a subclass with __slots__ and no __weakref__
        pass


def _wrap_random(cls) -> None:
    orig_init, orig_seed, orig_setstate = cls.__init__, cls.seed, cls.setstate

    def __init__(self, x=None):
        _note(self, x is not None)
        orig_init(self, x)

    def seed(self, a=None, version=2):
        _note(self, a is not None)
        return orig_seed(self, a, version)

    def setstate(self, state):
        _note(self, True)
        return orig_setstate(self, state)

    for wrapper, orig in ((__init__, orig_init), (seed, orig_seed), (setstate, orig_setstate)):
        wrapper.__doc__ = orig.__doc__
        wrapper.__wrapped__ = orig
        setattr(cls, orig.__name__, wrapper)


def _wrap_uuid1() -> None:
    orig = uuid.uuid1

    def uuid1(node=None, clock_seq=None):
        global _uuid1_calls
        if _recording:
            _uuid1_calls += 1
        return orig(node, clock_seq)

    uuid1.__doc__ = orig.__doc__
    uuid1.__wrapped__ = orig
    uuid.uuid1 = uuid1
