import os, time

def handler(event, context):
    a = event.get("action", "ok")
    if a == "ok":
        return "ok"
    if a == "cgroup":
        return open("/proc/self/cgroup").read()
    if a == "memory":
        blocks = []
        while True:
            blocks.append(bytearray(16 << 20))          # 16 MiB, touched
    if a == "forkbomb":
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    if a == "sleep_loop":
        while True:
            time.sleep(0.05)
    if a == "spin":
        while True:
            pass
    if a == "big":
        return "x" * (64 << 10)
