# BH-01: NumPy global RNG identical in forked children.
import numpy as np, random
np.random.random()                 # materialise the global NumPy state in the zygote

def handler(event, context):
    return int(np.random.randint(0, 2**62)), random.getrandbits(62)
