"""A real `zygo serve` for the client's tests: the repository's bin/zygo (built with `make
build` when missing) on a temporary state dir, as root, with real runsc and bwrap. A missing
tool fails the tests with how to install it; nothing is skipped.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import zygo  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class Missing(Exception):
    """A tool the tests need is not installed; the message says how to install it."""


def zygo_bin() -> str:
    """$ZYGO_BIN, else the repository's bin/zygo, built with `make build` when missing."""
    path = os.environ.get("ZYGO_BIN") or os.path.join(REPO, "bin", "zygo")
    if not os.path.exists(path):
        if shutil.which("go") is None and not os.path.exists("/usr/local/go/bin/go"):
            raise Missing(f"{path} is missing and there is no Go to build it: install Go and run `make build` in {REPO}")
        subprocess.run(["make", "build"], cwd=REPO, check=True)
    return path


def check_tools() -> None:
    """Raises Missing unless this runs as root with runsc and bwrap installed."""
    if os.geteuid() != 0:
        raise Missing("these tests start a Zygo daemon with gVisor sandboxes: run them as root")
    if not os.path.exists("/usr/local/bin/runsc") and shutil.which("runsc") is None:
        raise Missing("runsc not found: install the pinned build with `sudo scripts/install-runsc.sh` (or `make deps`)")
    if shutil.which("bwrap") is None:
        raise Missing("bwrap not found: `apt-get install bubblewrap` (or `make deps`)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(state_dir: str) -> list:
    """The processes (a runsc, a zygote) whose command line names state_dir, and the mounts
    under it: what a daemon that stopped cleanly leaves none of."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if state_dir + "/" in cmd or cmd.rstrip().endswith(state_dir):
            out.append(f"pid {pid}: {cmd.strip()[:200]}")
    with open("/proc/self/mountinfo") as f:
        out += [f"mount {ln.split()[4]}" for ln in f if ln.split()[4].startswith(state_dir + "/")]
    return out


def self_signed(dir: str, name: str = "cert") -> tuple:
    """Writes a self-signed certificate for 127.0.0.1 (ECDSA P-256, a day) and its key into
    dir as NAME.pem and NAME.key with openssl; returns their paths."""
    if shutil.which("openssl") is None:
        raise Missing("openssl not found: `apt-get install openssl` (the tests make a TLS certificate with it)")
    cert, key = os.path.join(dir, name + ".pem"), os.path.join(dir, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=zygo", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


class Daemon:
    """`zygo serve --state-dir STATE --no-network --listen 127.0.0.1:PORT`, with
    --tls-cert and --tls-key when tls is (cert, key), started by start() and stopped (every
    sandbox and checkpoint removed first) by stop()."""

    def __init__(self, tls: tuple = ()):
        self.tls = tls
        check_tools()
        self.bin = zygo_bin()
        # Short: the unix socket's path under it is limited to 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="zpy-", dir="/tmp")
        self.addr = f"127.0.0.1:{free_port()}"
        self.log_path = os.path.join(tempfile.gettempdir(), os.path.basename(self.state_dir) + ".log")
        self.proc = None

    def start(self) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--state-dir", self.state_dir, "--no-network", "--listen", self.addr]
            + (["--tls-cert", self.tls[0], "--tls-key", self.tls[1]] if self.tls else []),
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        client = self.client()
        deadline = time.monotonic() + 120
        while True:
            try:
                client.status()
                return
            except zygo.Unreachable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"zygo serve did not answer; its log:\n{self.log()}")
                time.sleep(0.2)

    def client(self) -> zygo.Zygo:
        """A client of the daemon's unix socket."""
        return zygo.Zygo(socket=os.path.join(self.state_dir, zygo.SOCKET_NAME))

    def create_token(self, name: str) -> str:
        """Creates a token on the unix socket with `zygo token create` and returns its secret."""
        out = subprocess.run([self.bin, "token", "create", "--name", name, "--state-dir", self.state_dir, "-o", "json"],
                             check=True, capture_output=True, env=dict(os.environ, XDG_CONFIG_HOME=self.state_dir))
        return json.loads(out.stdout)["secret"]

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-8000:]

    def stop(self) -> None:
        if self.proc is None:
            return
        c = self.client()
        try:
            for sb in reversed(c.sandboxes.list()):
                sb.kill()
            for _ in range(8):  # descendants before ancestors
                cps = c.checkpoints.list()
                if not cps:
                    break
                for cp in reversed(cps):
                    try:
                        c.checkpoints.remove(cp)
                    except zygo.FailedPrecondition:
                        pass
        finally:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
            left = leftovers(self.state_dir)
            os.remove(self.log_path)
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if left:
                raise AssertionError(f"left behind after the daemon stopped: {left}")
