"""zygo check functions: the Python probe. Import-time code puts every
generator in a live state in the zygote; each request reports what it draws
and what it can see. Keys are row names; the auditor holds the expectations."""
import atexit
import ctypes
import glob
import os
import random
import secrets
import socket
import ssl
import tempfile
import uuid

import numpy as np

random.random()                      # the stdlib generator's state is live in the zygote
np.random.random()                   # so is NumPy's global state
ssl.RAND_bytes(16)                   # OpenSSL's DRBG is instantiated
uuid.uuid1()                         # uuid1's clock-seq/last-timestamp state exists
next(tempfile._get_candidate_names())
IMPORT_RNG = random.Random()         # a generator object made at import, no seed
IMPORT_RNG.random()
NATIVE = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtoken.so"))
GLOBAL = {"touched_by": None}        # a global a request may change
ATEXIT_MARK = "/tmp/zygo-check-zygote-atexit"
atexit.register(lambda: open(ATEXIT_MARK, "w").close())   # must never run in a child


def _sockets():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def handler(event, context):
    earlier = GLOBAL["touched_by"]
    GLOBAL["touched_by"] = context.request_id
    return {
        "random.random()": random.random(),
        "numpy np.random.random()": float(np.random.random()),
        "uuid.uuid4()": str(uuid.uuid4()),
        "os.urandom(16)": os.urandom(16).hex(),
        "secrets.token_hex(16)": secrets.token_hex(16),
        "uuid.uuid1()": str(uuid.uuid1()),
        "ssl.RAND_bytes(16)": ssl.RAND_bytes(16).hex(),
        "random.Random() made at import": IMPORT_RNG.random(),
        "tempfile name": next(tempfile._get_candidate_names()),
        "TMPDIR": tempfile.gettempdir(),
        "pid": os.getpid(),
        "global set by an earlier request": earlier,
        "sockets in the fd table": _sockets(),
        "another function's secret": sorted(glob.glob("/run/secrets/*")),
        "zygote atexit ran in a child": os.path.exists(ATEXIT_MARK),
        "hostname": socket.gethostname(),
        "heap address of an import-time object": hex(id(GLOBAL)),
        "native buffer drawn at import": _native_token(),
    }


def _native_token():
    buf = ctypes.create_string_buffer(16)   # libtoken.so filled its own at load (getrandom)
    NATIVE.zygo_token(buf)
    return buf.raw.hex()
