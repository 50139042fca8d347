# Generator objects and a socket created at import time (warm-up checks).
import random, socket
import numpy as np
IMPLICIT = random.Random()          # no seed: must not repeat across requests
EXPLICIT = random.Random(42)        # explicit seed: stays deterministic
NP_IMPLICIT = np.random.default_rng()
NP_EXPLICIT = np.random.default_rng(7)
LISTENER = socket.socket(); LISTENER.bind(("127.0.0.1", 0)); LISTENER.listen()

def handler(event, context):
    return {"implicit": IMPLICIT.random(), "explicit": EXPLICIT.random(),
            "np_implicit": float(NP_IMPLICIT.random()), "np_explicit": float(NP_EXPLICIT.random())}
