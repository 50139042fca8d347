# Generators made at import but not held by a module global (found by the
# tester): in a dict, a class attribute, a closure, a default argument, and a
# bare _random.Random.
import _random
import functools
import numpy as np

HOLDER = {"rng": np.random.default_rng()}


class Service:
    rng = np.random.default_rng()


def _make():
    rng = np.random.default_rng()
    return lambda: float(rng.random())


from_closure = _make()


def default_arg(rng=np.random.default_rng()):
    return float(rng.random())


BARE = [_random.Random()]
KEPT = {"rng": np.random.default_rng(1234)}   # explicit seed: stays deterministic


def handler(event, context):
    return {"dict": float(HOLDER["rng"].random()), "class": float(Service.rng.random()),
            "closure": from_closure(), "default": default_arg(), "bare": BARE[0].random(),
            "explicit": float(KEPT["rng"].random())}
