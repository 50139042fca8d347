"""zygo check functions: a function that holds a secret, so the probes can
check they cannot see it."""
import os


import time


def handler(event, context):
    time.sleep(float(event.get("hold_s", 0)))   # keeps the secret file present meanwhile
    return sorted(os.listdir("/run/secrets"))
