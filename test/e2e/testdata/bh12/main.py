# BH-12: hidden native threads in the zygote.
import os, numpy as np
np.dot(np.ones((512, 512)), np.ones((512, 512)))     # spin up the BLAS worker pool
print("zygote threads:", len(os.listdir("/proc/self/task")))

def handler(event, context):
    a = np.ones((512, 512))
    return float(np.dot(a, a).sum())
