"""Watch the sandbox's generation and call back once per new copy.

Zygo publishes a new random generation (32 hex digits) at /run/zygo/generation in every copy of
a sandbox -- each fork child and each rollback -- before the copy is handed out, and the
copy's identity (sandbox id, parent, checkpoint, resumed_at, suspended_ns) in
/run/zygo/identity.json. A process that was running when the checkpoint was taken wakes up in
every copy with the same memory; a Watcher notices the new generation and runs the callbacks.

Latency: the watcher thread wakes on inotify events for /run/zygo where the kernel delivers
them, and polls every `interval` seconds (default 0.1) in any case, so a callback runs within
about `interval` after the generation is published. Call check() at the start of each unit of
work to close that window: it runs any pending callbacks in the calling thread, and returns
only once they are done.
"""
import json
import os
import select
import threading
import traceback

RUN_DIR = os.environ.get("ZYGO_RUN_DIR", "/run/zygo")


def _path(name):
    return os.path.join(RUN_DIR, name)


def current():
    """The current generation (32 hex digits), or None outside a sandbox."""
    try:
        with open(_path("generation")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def identity():
    """The current copy's identity.json as a dict ({} when missing)."""
    try:
        with open(_path("identity.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class _Inotify:
    """An inotify watch on a directory, through libc (ctypes); None where unavailable."""

    _MASK = 0x8 | 0x80 | 0x100  # IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

    def __init__(self, fd):
        self.fd = fd

    @classmethod
    def open(cls, directory):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(directory), cls._MASK) < 0:
                os.close(fd)
                return None
            return cls(fd)
        except (OSError, AttributeError):
            return None

    def wait(self, timeout):
        """Waits up to timeout seconds for an event and drains the queue."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                while os.read(self.fd, 4096):
                    pass
            except BlockingIOError:
                pass

    def close(self):
        os.close(self.fd)


class Watcher:
    """Runs callbacks once for every new generation it observes.

    The generation seen when the Watcher is made is the baseline: nothing runs for it. Each
    callback is called as callback(generation, identity_dict), in the watcher's thread or in the
    thread that calls check(); callbacks of one generation run once, in the order they were
    added, and an exception in one is printed and does not stop the others.
    """

    def __init__(self, interval=0.1):
        self.interval = interval
        self._lock = threading.RLock()  # guards _seen and _callbacks; held while callbacks run
        self._seen = current()
        self._callbacks = []
        self._stop = threading.Event()
        self._thread = None

    def add(self, callback):
        with self._lock:
            self._callbacks.append(callback)
        return callback

    def check(self):
        """Runs the callbacks now if the generation changed; returns True if it did."""
        gen = current()
        if gen is None:
            return False
        with self._lock:
            if gen == self._seen:
                return False
            self._seen = gen
            ident = identity()
            for cb in list(self._callbacks):
                try:
                    cb(gen, ident)
                except Exception:
                    traceback.print_exc()
        return True

    def start(self):
        """Starts the background thread (a daemon thread); idempotent."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zygo-generation", daemon=True)
                self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self):
        ino = _Inotify.open(RUN_DIR)
        try:
            while not self._stop.is_set():
                self.check()
                if ino is not None:
                    ino.wait(self.interval)
                else:
                    self._stop.wait(self.interval)
        finally:
            if ino is not None:
                ino.close()


_default = None
_default_lock = threading.Lock()


def default_watcher(interval=0.1):
    """The process's shared Watcher, made on first use (its baseline is then)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Watcher(interval)
        return _default


def on_new_generation(callback, interval=0.1):
    """Calls callback(generation, identity) once in every new copy of this sandbox.

    Starts the shared watcher thread on first use; the generation current at that moment is
    the baseline. Call it before the checkpoint is taken. Usable as a decorator.
    """
    w = default_watcher(interval)
    w.add(callback)
    w.start()
    return callback


def check():
    """Runs pending callbacks of the shared watcher now; True if the generation changed."""
    return default_watcher().check()
