"""The fourth class: memory shared with every sibling, made at import. Each request reads
the counter in each region, then writes its own id into it; with MAP_SHARED inherited, a
request sees what another one wrote."""
import ctypes
import mmap
import multiprocessing
from multiprocessing import shared_memory

ANON = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)  # anonymous shared
ANON[:8] = b"zygote\0\0"
VALUE = multiprocessing.Value("i", 0)  # a deleted file in /dev/shm, and a SemLock
SHM = shared_memory.SharedMemory(create=True, size=64)  # /dev/shm/psm_*
SHM.buf[:8] = b"zygote\0\0"


def handler(event, context):
    seen = {"anon": ANON[:8].rstrip(b"\0").decode(), "value": VALUE.value,
            "shm": bytes(SHM.buf[:8]).rstrip(b"\0").decode()}
    mine = event["id"].encode().ljust(8, b"\0")[:8]
    ANON[:8] = mine
    with VALUE.get_lock():
        VALUE.value = int(event["id"]) + 1
    SHM.buf[:8] = mine
    context_wait = event.get("wait", 0)
    if context_wait:  # concurrent requests overlap for this long
        import time
        time.sleep(context_wait)
        seen["anon_after"] = ANON[:8].rstrip(b"\0").decode()
    return seen
