# A hostile handler: it replaces a name in its own request directory
# (result.json, stdout or stderr) with something that is not the regular
# file the supervisor expects, the way docs/security.md's "Files the sandbox
# writes" describes.
import os
import tempfile
import time


def handler(event, context):
    if event.get("kind") == "none":
        print("served", context.request_id)
        return "served"
    req = os.path.dirname(tempfile.gettempdir().rstrip("/"))
    at, kind = event["at"], event["kind"]
    print("before the plant")
    staged = os.path.join(req, "tmp", "plant")
    if kind == "symlink":
        os.symlink(event["target"], staged)
    elif kind == "fifo":
        os.mkfifo(staged)
    elif kind == "hardlink":
        own = os.path.join(req, "tmp", "own")
        with open(own, "w") as f:
            f.write('{"ok": true, "value": "hard-linked"}\n')
        os.link(own, staged)
    elif kind == "directory":
        os.mkdir(staged)
        os.mkdir(os.path.join(staged, "inner"))
    elif kind == "sparse":
        with open(staged, "w") as f:
            f.truncate(1 << 40)  # 1 TiB, no blocks
    elif kind == "result":
        # A valid result of its own, renamed into place early; at result.json the
        # process then lingers (below) until the supervisor kills it past the deadline.
        with open(staged, "w") as f:
            f.write('{"ok": true, "value": "answered-early"}\n')
    else:
        raise ValueError("unknown kind " + kind)
    try:
        os.unlink(os.path.join(req, at))
    except FileNotFoundError:
        pass
    os.rename(staged, os.path.join(req, at))
    if at == "result.json":
        # Never write a result of its own: the plant is all the supervisor gets.
        time.sleep(3600)
    return "planted"
