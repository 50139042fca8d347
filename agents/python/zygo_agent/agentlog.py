"""Lock-free diagnostics for the agent itself.

The agent's messages go to file descriptor 2 with one ``os.write`` per line: no ``logging``
module, no ``sys.stderr`` object, so no Python-level lock is taken. This matters between
``fork()`` and the child's resets (case BH-11: a logging call in an after-fork hook deadlocked
on a lock held by a thread that does not exist in the child).
"""

import os

_PREFIX = b"zygo-agent: "


def log(message: str) -> None:
    """Write one line to fd 2. Returns nothing; never raises (errors are dropped)."""
    line = _PREFIX + message.replace("\n", " | ").encode("utf-8", "backslashreplace") + b"\n"
    try:
        os.write(2, line)
    except OSError:
        pass
