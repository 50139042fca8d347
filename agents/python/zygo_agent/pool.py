"""Runtime pools: the zygote imports only the pool's preloads; each request brings a
tenant's script, loaded in the forked child after ``go`` (docs/protocol.md, "Pool requests").

A pool's code directory holds one generated module, ``zygo_pool_boot.py``, whose import is
the pool's import (``import numpy`` for ``preload = ["numpy"]``) and whose ``handler`` is
:data:`handler` below. :mod:`child` gives the ``go`` message (and the descriptor attached to
it) to :meth:`PoolHandler.zygo_bind_request`, which returns the request's real handler: a
callable that, once :func:`child._prepare` has run (stdio, reseed, ``TMPDIR``, Landlock,
strict filter), confines the request's writes to its own request directory, loads the
tenant's entry point from the script and calls it. Nothing of the script is in the zygote:
the text is read by the child alone, from

- ``/proc/self/fd/N``, the root of a detached read-only mount of the script's directory
  that the daemon made (``open_tree``) and attached to ``go`` (``script.mounted``); ``..``
  at the root of a detached mount stays there, so nothing else of the host is reachable
  through it; or
- ``DIR/script``, files the daemon wrote into the request directory, when it could make no
  mount (a daemon that is not root); the daemon logs that for the request.
"""

import ctypes
import importlib
import os
import sys
from typing import Callable, Sequence

from . import libc

# Landlock filesystem rights (linux/landlock.h).
_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3

# Every right that changes the filesystem: handled by a pool request's domain, granted only
# beneath its request directory, so nothing one tenant's request leaves in the sandbox's
# shared /tmp or /dev/shm (a file, a directory, a symlink whose target carries data, a
# socket or FIFO) can be read by the next request, whoever it belongs to.
CONFINED_RIGHTS = (_FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR
                   | _FS_MAKE_DIR | _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO
                   | _FS_MAKE_BLOCK | _FS_MAKE_SYM | _FS_REFER | _FS_TRUNCATE)
_FILE_RIGHTS = _FS_WRITE_FILE | _FS_TRUNCATE  # what a rule on a single file may grant
# Devices a request may still open for writing: they hold nothing another request can read.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
_CONFINED_ABI = 3  # TRUNCATE is in CONFINED_RIGHTS


class ScriptError(Exception):
    """The go message's script is malformed (a protocol error, not the tenant's)."""


class PoolHandler:
    """The pool's handler object (``zygo_pool_boot.handler``). Called directly it is an
    error: a pool request always comes with a script."""

    def __call__(self, event, context):
        raise ScriptError("this pool request came without a script")

    def zygo_bind_request(self, go) -> Callable:
        """Return the handler of the request ``go`` (:class:`child._Go`: ``body`` and
        ``fds``): :func:`run_script` bound to its script. Takes ownership of ``go.fds``.
        Raises :class:`ScriptError` for a go without a valid ``script`` member."""
        script = go.body.get("script")
        if not isinstance(script, dict):
            _close(go.fds)
            raise ScriptError("go: script is missing")
        entry, mounted = script.get("entry"), script.get("mounted") is True
        if not isinstance(entry, str) or entry.count(":") != 1:
            _close(go.fds)
            raise ScriptError(f"go: script entry {entry!r} is not MODULE:FUNCTION")
        if mounted:
            if len(go.fds) != 1:
                _close(go.fds)
                raise ScriptError(f"go: a mounted script carries 1 descriptor, not {len(go.fds)}")
            root = f"/proc/self/fd/{go.fds[0]}"
        else:
            _close(go.fds)
            root = os.path.join(go.dir, "script")
        tenant, digest = str(script.get("tenant") or ""), str(script.get("hash") or "")

        def handler(event, context):
            context.tenant, context.script = tenant, digest
            return run_script(root, entry, go.dir, event, context)
        return handler


def run_script(root: str, entry: str, request_dir: str, event, context):
    """Confine the request's writes to ``request_dir`` (:func:`confine`), import the module
    of ``entry`` (``MODULE:FUNCTION``, FUNCTION a dotted path) from ``root`` and return what
    the function returns for ``(event, context)``. Whatever the script raises (its import
    included) propagates: the request's result is then the tenant's error, with its
    traceback."""
    confine(request_dir)
    sys.dont_write_bytecode = True  # the mount is read-only; nothing is cached anywhere
    sys.path.insert(0, root)
    module_name, _, attr_path = entry.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"entry {entry!r} is a {type(obj).__name__}, not a function")
    return obj(event, context)


def confine(request_dir: str, devices: Sequence[str] = WRITABLE_DEVICES) -> bool:
    """Enter a nested Landlock domain that handles every right changing the filesystem
    (:data:`CONFINED_RIGHTS`) and grants them only beneath ``request_dir`` (its ``tmp/`` is
    the request's ``TMPDIR`` and ``HOME``), plus writing to ``devices``. Returns True once
    confined, False when the kernel's Landlock is older than ABI 3 (the pool's ``landlock``
    warm-up check says so; the request then runs with the function-level domain only).
    Raises ``OSError`` when Landlock refuses."""
    if libc.landlock_abi() < _CONFINED_ABI:
        return False
    attr = libc._LandlockRulesetAttr(CONFINED_RIGHTS, 0, 0)
    fd = libc._libc.syscall(ctypes.c_long(libc._SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                            ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, "landlock_create_ruleset: " + os.strerror(err))
    try:
        _allow(fd, request_dir, CONFINED_RIGHTS)
        for device in devices:
            _allow(fd, device, _FILE_RIGHTS)
        if libc._libc.prctl(libc._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(err))
        if libc._libc.syscall(ctypes.c_long(libc._SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(fd),
                              ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "landlock_restrict_self: " + os.strerror(err))
    finally:
        os.close(fd)
    return True


def _allow(ruleset: int, path: str, access: int) -> None:
    """Grant ``access`` beneath ``path`` (a directory, or a single file) in ``ruleset``; a
    missing ``path`` is skipped. Raises ``OSError``."""
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        rule = libc._LandlockPathBeneathAttr(access, target)
        if libc._libc.syscall(ctypes.c_long(libc._SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                              ctypes.c_int(libc._LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                              ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): " + os.strerror(err))
    finally:
        os.close(target)


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


handler = PoolHandler()
