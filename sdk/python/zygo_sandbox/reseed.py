"""Reseed this process's own random generators from the kernel.

In a Zygo sandbox the kernel's randomness (os.urandom, secrets, uuid.uuid4) already differs in
every copy; what a copy shares with its siblings is the state of generators that live in the
process's memory. reseed() renews the ones it can reach in this process: nothing outside it.

The work is done by reseedcore.py, a byte-for-byte copy of agents/python/zygo_agent/
reseedcore.py (Zygo's one reseed implementation, also run by the function agent and by the
sandbox's code interpreter); do not edit it here: edit that file and run `go generate ./agents`.
"""
from . import reseedcore

ReseedError = reseedcore.ReseedError


def reseed(*generators, all_generators=False):
    """Reseeds, from os.urandom:

    - the random module's global generator;
    - NumPy's global (legacy) state, if numpy is imported;
    - torch's default generator, if torch is imported;
    - OpenSSL's generator inside this process, with ssl.RAND_add;
    - uuid1's clock sequence (it then draws a fresh one from random on every call);
    - tempfile's name sequence, so temporary names differ from the siblings';
    - every generator passed (random.Random, numpy Generator, BitGenerator or RandomState);
    - with all_generators=True, every random.Random and NumPy generator object the garbage
      collector can reach (including ones seeded on purpose with a constant).

    It cannot reach generators in other processes, or those of runtimes it does not know.
    Every step runs even if one fails; then it raises ReseedError, whose failures list
    (step, exception) pairs (a TypeError for a generator it cannot reseed). Returns the names
    of the steps that ran.
    """
    return reseedcore.reseed_all(generators=generators, all_generators=all_generators)
