# BH-18: atexit handlers registered in the zygote run in every child.
import atexit, os
open("/tmp/zygote.alive", "w").close()
atexit.register(lambda: os.path.exists("/tmp/zygote.alive") and os.remove("/tmp/zygote.alive"))

def handler(event, context):
    if event.get("check"):
        return os.path.exists("/tmp/zygote.alive")
    atexit.register(print, "child-exit", event["id"])
    return "ok"
