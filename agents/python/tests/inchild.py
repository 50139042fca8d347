"""Running a probe in a forked child of the test process, which the probe may restrict (a
Landlock domain) or change (huge pages) for good without touching the test process."""

import os


def in_child(fn, check: bool = False) -> str:
    """Run ``fn()`` in a forked child and return ``str`` of what it returned. When it raised:
    its exception's ``repr`` (some probes expect one), or, with ``check``, an
    ``AssertionError`` here naming it. The child leaves with ``os._exit``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            try:
                out, code = str(fn()), 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = repr(exc)
            os.write(w, out.encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if check and os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError(f"the child failed: {out!r}")
    return out
