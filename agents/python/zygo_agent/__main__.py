"""Entry point: ``main()`` runs the start-up sequence of docs/protocol.md.

The supervisor starts::

    /usr/bin/python3 -I -c "import sys; sys.path.insert(0, '/opt/zygo/agents/python'); \
        from zygo_agent.__main__ import main; main()" \
        --code /code --handler main:handler --mode fork [--path vendor ...]

with the zygote end of the control socket as fd 3 (``python -c`` leaves the options in
``sys.argv[1:]``). Start-up order: native thread pools to one thread; the intent recorder;
the user import; the warm-up checks; ``gc.freeze()``; flush; ``ready`` (or ``import_error``
and status 1); then the fork loop or the spawn-mode wait.
"""

import argparse
import gc
import os
import socket
import ssl
import sys
import uuid
from typing import List, NoReturn, Optional

from . import libc, child, hugetext, loader, recorder, reseed, warmup, wire, zygote
from .agentlog import log

CONTROL_FD = 3
EXIT_USAGE = 2

# Thread-pool sizes read by native libraries when they start their pools. The supervisor
# sets these too; values already in the environment (from the function's manifest) win.
_NATIVE_POOL_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Return the parsed ``--code``, ``--handler``, ``--mode``, ``--path``s, ``--memory-mib`` and
    ``--no-huge-pages``; exits with status 2 on a usage error (argparse)."""
    parser = argparse.ArgumentParser(prog="zygo_agent", description="Zygo Python agent")
    parser.add_argument("--code", required=True, help="directory holding the user's code")
    parser.add_argument("--handler", required=True, help="MODULE:FUNCTION")
    parser.add_argument("--mode", choices=("fork", "spawn"), default="fork")
    parser.add_argument("--path", action="append", default=[],
                        help="a directory of the code put on sys.path after it (python_path)")
    parser.add_argument("--memory-mib", type=int, default=0,
                        help="the zygote's memory limit, MiB (zygote_memory_mib; 0: none): "
                             "huge pages take at most half of it (hugetext)")
    parser.add_argument("--no-huge-pages", action="store_true",
                        help="keep the interpreter's code and the heap on small pages (hugetext)")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> NoReturn:
    """Run the agent. Never returns: exits 0 after ``stop`` or end of stream, 1 after an
    import error, 2 on a usage error or a missing control socket."""
    args = parse_args(argv)
    code_dir = os.path.abspath(args.code)
    for name in _NATIVE_POOL_VARS:  # step 1
        os.environ.setdefault(name, "1")
    control = _open_control_socket()
    _close_stray_fds()
    # Non-dumpable before any user code: the zygote's /proc/PID/mem, fd/ and
    # environ become unreachable for the sandbox uid (it has no CAP_SYS_PTRACE),
    # and every child inherits the flag from its first instant, so neither a
    # request nor a sibling can read or write another process's memory.
    libc.set_dumpable(False)
    recorder.install()  # step 2
    try:
        handler = loader.load_handler(code_dir, args.handler, args.path)  # step 3
    except loader.ImportFailure as failure:
        zygote.flush_stdio()
        _send_or_exit(control, {"type": "import_error", "error": failure.error})
        sys.exit(1)
    report = warmup.run(code_dir, agent_fds=(CONTROL_FD,), mode=args.mode,
                        handler=args.handler)  # step 4
    _prepare_for_forks(report, args.mode, None if args.no_huge_pages else args.memory_mib)
    zygote.flush_stdio()  # step 5
    _send_or_exit(control, {"type": "ready", "pid": os.getpid(),
                            "python": sys.version.split()[0],
                            "openssl": ssl.OPENSSL_VERSION, "fork_safe": report.fork_safe,
                            "checks": report.checks})

    def serve(fd: int) -> NoReturn:
        child.serve_request(fd, handler, forked=args.mode == "fork")

    if args.mode == "spawn":
        sys.exit(zygote.serve_spawn(control, serve))
    sys.exit(zygote.Zygote(control, serve).serve())


def _close_stray_fds() -> None:
    """Close every descriptor but 0, 1, 2 and the control socket: whatever the process
    that started the supervisor leaked must not reach user code (``os.closerange`` ignores
    descriptors that are not open)."""
    os.closerange(CONTROL_FD + 1, os.sysconf("SC_OPEN_MAX"))


def _open_control_socket() -> socket.socket:
    """Return the control socket on fd 3, made close-on-exec so that processes started by the
    user's import cannot inherit it. Exits with status 2 if fd 3 is not a SEQPACKET socket."""
    try:
        control = socket.socket(fileno=CONTROL_FD)
    except OSError as exc:
        log(f"fd {CONTROL_FD} is not the control socket: {exc}")
        sys.exit(EXIT_USAGE)
    if control.family != socket.AF_UNIX or control.type != socket.SOCK_SEQPACKET:
        log(f"fd {CONTROL_FD} is not an AF_UNIX SOCK_SEQPACKET socket")
        sys.exit(EXIT_USAGE)
    control.set_inheritable(False)
    control.setblocking(True)
    return control


def _prepare_for_forks(report: warmup.Report, mode: str, memory_mib: Optional[int] = 0) -> None:
    """Stop recording, register the NumPy generators to reseed, cache uuid's hardware
    address (so a child's pure-Python ``uuid1`` need not run ``ip``), set up OpenSSL's
    random generators (:func:`_init_openssl_random`), in fork mode list the rules every
    request's Landlock domain holds (:func:`child.domain_plan`), move every object into the GC's
    permanent generation (children neither touch their pages nor finalise the zygote's
    garbage), and in fork mode put the interpreter's code and the zygote's heap on huge
    pages within half of ``memory_mib`` (:mod:`hugetext`; ``None``: not at all)."""
    recorder.stop()
    for generator in report.numpy_generators:
        reseed.register_numpy_generator(generator)
    uuid.getnode()
    _init_openssl_random()
    if mode == "fork" and libc.landlock_abi() >= libc.LANDLOCK_SCOPED_ABI:
        try:
            child.domain_plan()  # the rules every request's domain holds, listed once
        except OSError as exc:
            log(f"listing what a request may read (each child lists it again): {exc}")
    gc.collect()
    gc.freeze()
    if mode == "fork" and memory_mib is not None:
        log(huge_pages_line(hugetext.move_to_huge_pages(memory_mib)))


def huge_pages_line(moved: hugetext.Moved) -> str:
    """The zygote's log line saying what :func:`hugetext.move_to_huge_pages` did."""
    half = ("" if moved.budget is None else
            f"; room left under half of zygote_memory_mib: {max(moved.budget, 0) >> 20} MiB")
    skipped = f", {moved.skipped} left out for the limit" if moved.skipped else ""
    return (f"huge pages: {len(moved.text)} range(s) of the interpreter's code and "
            f"{len(moved.heap)} of the heap and arenas{skipped}, about "
            f"{moved.added + (1 << 19) >> 20} MiB more memory{half}")


def _init_openssl_random() -> None:
    """Draw one byte from OpenSSL, so that its random machinery (the provider's method
    lookups and the primary and public DRBG objects) is built once here, not in every child:
    built in a child, it was 1-3 ms of CPU per request, mostly copy-on-write faults on
    OpenSSL's tables. What every child still does is unchanged: OpenSSL (>= 1.1.1d) reseeds
    its DRBGs from the kernel at their first use after the fork (it tracks the process id),
    and for an older one (a 3.0.0 development release, LibreSSL) the child's reseed mixes in
    fresh OS entropy with ``ssl.RAND_add`` (rule 7, :data:`reseed.OPENSSL_RESEEDS_AFTER_FORK`);
    the byte drawn here is discarded (after warm-up's native-randomness snapshot, so the
    report is unchanged). Returns nothing."""
    ssl.RAND_bytes(1)


def _send_or_exit(control: socket.socket, msg: dict) -> None:
    try:
        wire.send(control, msg)
    except (OSError, ValueError) as exc:
        log(f"could not send {msg['type']}: {exc}")
        sys.exit(1)


if __name__ == "__main__":
    main()
