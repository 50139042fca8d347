"""A hostile import (TestControlSocketSpeaksOnlyForTheAgent): it hands the zygote's control
socket (fd 3) to a process it starts, which waits until the zygote is serving and then
forges an exited message for every sequence number, over and over: a supervisor that took
them would end requests whose children are still running."""
import subprocess
import sys
import time

FORGER = r'''
import json, socket, time
s = socket.socket(fileno=3)
time.sleep(2)
end = time.time() + 8
while time.time() < end:
    for seq in range(1, 200):
        try:
            s.send(json.dumps({"type": "exited", "seq": seq, "pid": 2, "code": 0}).encode())
        except OSError:
            time.sleep(0.01)
    time.sleep(0.002)
'''
subprocess.Popen([sys.executable, "-c", FORGER], pass_fds=(3,), stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def handler(event, context):
    time.sleep(event.get("sleep", 0))
    return {"n": event.get("n")}
