"""Reseed this process's own random generators from the kernel.

In a Zygo sandbox the kernel's randomness (os.urandom, secrets, uuid.uuid4) already differs in
every copy; what a copy shares with its siblings is the state of generators that live in the
process's memory. reseed() renews the ones it can reach in this process: nothing outside it.
"""
import gc
import os
import random
import sys


def _words(n):
    """n 32-bit seed words from the kernel."""
    b = os.urandom(4 * n)
    return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b), 4)]


def _reseed_one(g, np):
    if isinstance(g, random.Random):
        g.seed(os.urandom(32))
    elif np is not None and isinstance(g, np.random.Generator):
        bg = g.bit_generator
        bg.state = type(bg)(int.from_bytes(os.urandom(16), "little")).state
    elif np is not None and isinstance(g, np.random.RandomState):
        g.seed(_words(8))
    else:
        raise TypeError("cannot reseed %r" % (g,))


def reseed(*generators, all_generators=False):
    """Reseeds, from os.urandom:

    - the random module's global generator;
    - NumPy's global (legacy) state, if numpy is imported;
    - torch's default generator, if torch is imported;
    - OpenSSL's generator inside this process, with ssl.RAND_add, if ssl is imported;
    - tempfile's name sequence, so temporary names differ from the siblings';
    - every generator passed (random.Random, numpy Generator or RandomState);
    - with all_generators=True, every random.Random and NumPy generator object the garbage
      collector can reach (including ones seeded on purpose with a constant).

    It cannot reach generators in other processes, or those of runtimes it does not know.
    """
    random.seed(os.urandom(32))
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(_words(8))
    for g in generators:
        _reseed_one(g, np)
    if all_generators:
        kinds = (random.Random,) if np is None else (random.Random, np.random.Generator, np.random.RandomState)
        for o in gc.get_objects():
            if isinstance(o, kinds) and o is not random._inst:
                _reseed_one(o, np)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        ssl.RAND_add(os.urandom(32), 32.0)
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile._name_sequence = None
