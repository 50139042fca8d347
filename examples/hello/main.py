"""The smallest Zygo function: greets, and shows that every request draws
its own random numbers and gets its own temp folder."""
import os
import random
import tempfile
import uuid


def handler(event, context):
    name = event.get("name", "world")
    return {
        "greeting": f"hello, {name}",
        "request_id": context.request_id,
        "random": random.random(),
        "uuid4": str(uuid.uuid4()),
        "pid": os.getpid(),
        "tmpdir": tempfile.gettempdir(),
    }
