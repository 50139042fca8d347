"""The client finds a remote daemon as the CLI does: a real daemon serving TLS on 127.0.0.1
with a self-signed certificate, reached through the context file only (address, token, ca);
a wrong CA or name is a CertificateError; the file's token never goes to an address given by
argument or $ZYGO_ADDR (a plain HTTP listener records what it receives); unknown keys, a
token file others can read and bad schemes are ConfigErrors; an exec's stdin streams over TLS
while its output is read (one relay thread owns the TLS socket).

    cd sdk/python && sudo /usr/bin/python3 -m unittest discover -s tests
"""

import http.server
import os
import queue
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from realdaemon import Daemon, self_signed  # noqa: E402

import zygo  # noqa: E402

D = None
CERTS = None
SECRET = None


def setUpModule():
    global D, CERTS, SECRET
    CERTS = tempfile.mkdtemp(prefix="zpy-certs-")
    unittest.addModuleCleanup(shutil.rmtree, CERTS, ignore_errors=True)
    D = Daemon(tls=self_signed(CERTS))
    D.start()
    SECRET = D.create_token("t")


def tearDownModule():
    if D is not None:
        D.stop()


class Context:
    """A context file under a fresh $XDG_CONFIG_HOME, with $ZYGO_ADDR, $ZYGO_TOKEN and $ZYGO_CA
    unset and $ZYGO_STATE_DIR a directory without api.token, for one test; env sets more."""

    def __init__(self, test, body, mode=0o600, env=None):
        self.dir = tempfile.mkdtemp(prefix="zpy-cfg-")
        test.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        os.makedirs(os.path.join(self.dir, "zygo"))
        self.path = os.path.join(self.dir, "zygo", "config.toml")
        with open(self.path, "w") as f:
            f.write(body)
        os.chmod(self.path, mode)
        shutil.copy(os.path.join(CERTS, "cert.pem"), os.path.join(self.dir, "zygo", "ca.pem"))
        want = {"XDG_CONFIG_HOME": self.dir, "ZYGO_ADDR": None, "ZYGO_TOKEN": None, "ZYGO_CA": None,
                "ZYGO_STATE_DIR": self.dir}
        want.update(env or {})
        for k, v in want.items():
            old = os.environ.get(k)
            test.addCleanup(_setenv, k, old)
            _setenv(k, v)


def _setenv(k, v):
    if v is None:
        os.environ.pop(k, None)
    else:
        os.environ[k] = v


def tls_context(test, **extra):
    """The context file of the TLS daemon: its https address, the token t, ca.pem beside it."""
    body = f'address = "https://{D.addr}"\ntoken = "{SECRET}"\nca = "ca.pem"  # relative to this file\n'
    body += "".join(f'{k} = "{v}"\n' for k, v in extra.items())
    return Context(test, body)


class Recorder:
    """A plain HTTP listener on 127.0.0.1 answering every call as a daemon's status would,
    recording the Authorization header of each (None when absent)."""

    def __init__(self):
        self.auth = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                rec.auth.append(self.headers.get("Authorization"))
                body = b'{"version": "recorder", "api_version": 1}'
                self.send_response(200)
                self.send_header("Zygo-Api-Version", "1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class RemoteTest(unittest.TestCase):
    def test_functions_over_tls_from_the_context_file(self):
        tls_context(self)
        c = zygo.Zygo()
        self.assertEqual((c.where, c.target.token_from), (f"https://{D.addr}", c.target.context_path))
        d = tempfile.mkdtemp(prefix="zpy-fn-")
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "zygo.toml"), "w") as f:
            f.write('name = "tlsecho"\nruntime = "python"\nhandler = "main:handler"\n')
        with open(os.path.join(d, "main.py"), "w") as f:
            f.write("def handler(event, context):\n    return {'got': event}\n")
        c.functions.deploy(d)
        self.assertIn("tlsecho", [f["name"] for f in c.functions.list()])
        self.assertEqual(c.functions.invoke("tlsecho", {"n": 1}).value, {"got": {"n": 1}})

    def test_host_port_with_a_ca_is_tls(self):
        Context(self, f'address = "{D.addr}"\ntoken = "{SECRET}"\nca = "ca.pem"\n')
        c = zygo.Zygo()
        self.assertEqual(c.where, f"https://{D.addr}")
        self.assertIn("version", c.status())

    def test_token_from_the_file_is_refused_by_the_daemon_when_wrong(self):
        Context(self, f'address = "https://{D.addr}"\ntoken = "zygo_wrong"\nca = "ca.pem"\n')
        with self.assertRaises(zygo.Unauthenticated):
            zygo.Zygo().status()

    def test_a_wrong_ca_is_a_certificate_error(self):
        ctx = tls_context(self)
        other, _ = self_signed(ctx.dir, "other")
        with self.assertRaises(zygo.CertificateError) as cm:
            zygo.Zygo(ca=other).status()
        self.assertIn("not signed by a CA this client trusts", str(cm.exception))
        self.assertIn("$ZYGO_CA", str(cm.exception))
        self.assertNotIsInstance(cm.exception, zygo.Unreachable)

    def test_a_certificate_for_another_name_is_a_certificate_error(self):
        tls_context(self, server_name="zygo.example.com")
        with self.assertRaises(zygo.CertificateError) as cm:
            zygo.Zygo().status()
        self.assertIn("not for zygo.example.com", str(cm.exception))

    def test_the_file_token_never_goes_to_another_address(self):
        rec = Recorder()
        self.addCleanup(rec.close)
        tls_context(self)
        # ca from the file would make host:port TLS; http:// forces plain.
        zygo.Zygo(addr=f"http://{rec.addr}").status()
        _setenv("ZYGO_ADDR", f"http://{rec.addr}")
        zygo.Zygo().status()
        zygo.Zygo(addr=f"http://{rec.addr}", token="given").status()  # the recorder does record a token
        self.assertEqual(rec.auth, [None, None, "Bearer given"])

    def test_unknown_key_is_refused(self):
        ctx = Context(self, f'address = "https://{D.addr}"\nadress = "x"\n')
        with self.assertRaises(zygo.ConfigError) as cm:
            zygo.Zygo()
        self.assertIn("unknown key 'adress'", str(cm.exception))
        self.assertIn(ctx.path, str(cm.exception))

    def test_a_token_file_others_can_read_is_refused(self):
        ctx = Context(self, f'address = "https://{D.addr}"\ntoken = "{SECRET}"\n', mode=0o644)
        with self.assertRaises(zygo.ConfigError) as cm:
            zygo.Zygo()
        self.assertIn(f"the context file {ctx.path} holds a token and has mode 644: chmod 600 it", str(cm.exception))
        Context(self, f'address = "https://{D.addr}"\nca = "ca.pem"\n', mode=0o644)  # no token: fine
        self.assertEqual(zygo.Zygo().where, f"https://{D.addr}")

    def test_a_bad_scheme_names_where_it_came_from(self):
        ctx = Context(self, 'address = "ftp://127.0.0.1:1"\n')
        with self.assertRaises(zygo.ConfigError) as cm:
            zygo.Zygo()
        self.assertIn(ctx.path, str(cm.exception))
        for env, where in (({"ZYGO_ADDR": "ftp://127.0.0.1:1"}, "$ZYGO_ADDR"), ({}, "addr=")):
            Context(self, "", env=env)
            with self.assertRaises(zygo.ConfigError) as cm:
                zygo.Zygo(addr=None if env else "127.0.0.1")
            self.assertTrue(str(cm.exception).startswith(where), str(cm.exception))


class StreamingStdinOverTLSTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = D.client().sandboxes.create(name="pytls", memory_mib=256)

    @classmethod
    def tearDownClass(cls):
        cls.sb.__exit__()

    def test_stdin_and_output_stream_together(self):
        # Each line of stdin is sent only after cat's echo of the line before came back:
        # both directions are live on the one TLS connection at once.
        tls_context(self)
        sb = zygo.Zygo().sandboxes.get(self.sb.id)
        echoed = queue.Queue()

        def lines():
            for i in range(1, 4):
                yield f"line {i}\n".encode()
                echoed.get(timeout=60)

        seen, lines_back = b"", 0
        with sb.exec_stream(["cat"], stdin=lines(), timeout=120) as proc:
            for chunk in proc:
                # The TLS socket is the relay thread's alone (zygo/_tls.py), not shared by this
                # thread and the one sending stdin.
                self.assertIn("zygo-tls-relay", [t.name for t in threading.enumerate()])
                seen += chunk.data
                while seen.count(b"\n") > lines_back:
                    lines_back += 1
                    echoed.put(lines_back)
        self.assertEqual(seen, b"line 1\nline 2\nline 3\n")
        self.assertEqual(proc.exit_code, 0)

    def test_large_stdin(self):
        tls_context(self)
        sb = zygo.Zygo().sandboxes.get(self.sb.id)
        chunks = [b"x" * 300000, b"y" * 5, b"z"]
        r = sb.exec(["sh", "-c", "wc -c; echo done >&2"], stdin=iter(chunks))
        self.assertEqual((r.stdout.strip(), r.stderr), (b"300006", b"done\n"))

    def test_stdin_that_fails_abandons_the_call(self):
        tls_context(self)
        sb = zygo.Zygo().sandboxes.get(self.sb.id)

        def chunks():
            yield b"partial"
            raise OSError("the disk went away")
        with self.assertRaises(zygo.ZygoError):
            sb.exec(["sh", "-c", "echo $$ >/tmp/abandoned.pid; exec cat >/tmp/abandoned"], stdin=chunks())
        r = sb.exec(["sh", "-c", "for i in $(seq 100); do kill -0 $(cat /tmp/abandoned.pid) 2>/dev/null || exit 0; "
                                 "sleep 0.1; done; exit 1"])
        self.assertEqual(r.exit_code, 0, "the abandoned command still runs")


if __name__ == "__main__":
    unittest.main()
