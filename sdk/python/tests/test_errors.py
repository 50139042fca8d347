"""The client's own mapping of answers, against a stand-in daemon on a unix socket that
answers what each test sets: every error code to its exception class with the message, an
answer without an error body, another API version, pagination by cursor, and where the client
looks for the daemon. What a real daemon answers is in test_client.py.

    cd sdk/python && /usr/bin/python3 -m unittest discover -s tests
"""

import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import zygo  # noqa: E402
from realdaemon import self_signed  # noqa: E402
from zygo import errors  # noqa: E402

# Every code of sdk/go/wire/wire.go with its status and class.
CODES = {
    "not_found": (404, zygo.NotFound), "bad_request": (400, zygo.BadRequest),
    "too_large": (413, zygo.TooLarge), "exists": (409, zygo.AlreadyExists),
    "failed_precondition": (409, zygo.FailedPrecondition), "permission_denied": (403, zygo.PermissionDenied),
    "unavailable": (503, zygo.Unavailable), "deadline_exceeded": (504, zygo.DeadlineExceeded),
    "cancelled": (499, zygo.Cancelled), "internal": (500, zygo.Internal),
    "unauthenticated": (401, zygo.Unauthenticated), "import_failed": (422, zygo.ImportFailed),
    "too_many_requests": (429, zygo.TooManyRequests), "method_not_allowed": (405, zygo.MethodNotAllowed),
    "handler_error": (500, zygo.HandlerError), "timeout": (504, zygo.InvokeTimeout),
    "crashed": (502, zygo.Crashed), "zygote_died": (503, zygo.ZygoteDied),
    "response_too_large": (502, zygo.ResponseTooLarge), "limit_exceeded": (502, zygo.LimitExceeded),
    "bad_event": (400, zygo.BadEvent),
}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class StandIn:
    """An HTTP server on a unix socket; answer(method, path) returns (status, headers, body)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="zpy-u-")
        self.answer = lambda method, path: (200, {}, b"{}")
        self.requests = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                stand_in.requests.append((self.command, self.path))
                status, headers, body = stand_in.answer(self.command, self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args):
                pass

            def address_string(self):
                return "unix"

        self.server = _Server(os.path.join(self.dir, "zygo.sock"), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.dir)


def error_answer(status, code, message="", **extra):
    body = dict(code=code, message=message, **extra)
    return lambda m, p: (status, {"Content-Type": "application/json"}, json.dumps({"error": body}).encode())


class ErrorMappingTest(unittest.TestCase):
    def setUp(self):
        self.s = StandIn()
        self.addCleanup(self.s.close)
        self.c = zygo.Zygo(state_dir=self.s.dir)

    def test_every_code_has_its_class(self):
        self.assertEqual(set(CODES), set(errors.ERRORS) - {"http"}, "a code of the API without a test here")
        for code, (status, cls) in CODES.items():
            with self.subTest(code=code):
                self.s.answer = error_answer(status, code, f'sandbox "x": {code} happened')
                with self.assertRaises(cls) as cm:
                    self.c.sandboxes.get("x")
                e = cm.exception
                self.assertEqual((e.status, e.code, str(e)), (status, code, f'sandbox "x": {code} happened'))
                self.assertEqual(errors.status_of(code), status)

    def test_families(self):
        self.assertTrue(issubclass(zygo.AlreadyExists, zygo.Conflict))
        self.assertTrue(issubclass(zygo.FailedPrecondition, zygo.Conflict))
        self.assertTrue(issubclass(zygo.BadEvent, zygo.BadRequest))
        self.assertTrue(issubclass(zygo.InvokeTimeout, zygo.InvokeError))
        self.assertTrue(issubclass(zygo.Unreachable, ConnectionError))

    def test_invoke_error_fields(self):
        self.s.answer = error_answer(500, "handler_error", "boom", type="ValueError",
                                     traceback="Traceback ...\nValueError: boom", request_id="r-1")
        with self.assertRaises(zygo.HandlerError) as cm:
            self.c.functions.invoke("f", {})
        e = cm.exception
        self.assertEqual((e.type, e.request_id), ("ValueError", "r-1"))
        self.assertEqual(str(e), "boom\nTraceback ...\nValueError: boom")

    def test_empty_message_gets_the_category(self):
        self.s.answer = error_answer(404, "not_found")
        with self.assertRaisesRegex(zygo.NotFound, "^not found$"):
            self.c.functions.get("f")

    def test_unknown_code_keeps_it(self):
        self.s.answer = error_answer(418, "teapot", "short and stout")
        with self.assertRaises(zygo.ZygoError) as cm:
            self.c.functions.get("f")
        self.assertIs(type(cm.exception), zygo.ZygoError)
        self.assertEqual((cm.exception.code, cm.exception.status, str(cm.exception)), ("teapot", 418, "short and stout"))

    def test_answer_without_error_body(self):
        self.s.answer = lambda m, p: (502, {"Content-Type": "text/html"}, b"<h1>Bad Gateway</h1>")
        with self.assertRaises(zygo.HTTPError) as cm:
            self.c.status()
        self.assertEqual(str(cm.exception), "HTTP 502: <h1>Bad Gateway</h1>")

    def test_retry_after_and_allow(self):
        body = json.dumps({"error": {"code": "too_many_requests", "message": "over the limit"}}).encode()
        self.s.answer = lambda m, p: (429, {"Retry-After": "3"}, body)
        with self.assertRaises(zygo.TooManyRequests) as cm:
            self.c.status()
        self.assertEqual(cm.exception.retry_after, 3)
        body = json.dumps({"error": {"code": "method_not_allowed", "message": "PATCH /v1/status: method not allowed"}}).encode()
        self.s.answer = lambda m, p: (405, {"Allow": "GET, HEAD"}, body)
        with self.assertRaises(zygo.MethodNotAllowed) as cm:
            self.c.status()
        self.assertEqual(cm.exception.allow, ["GET", "HEAD"])

    def test_another_api_version(self):
        for status, body in ((200, b'{"version": "x"}'), (404, b'{"error": {"code": "not_found", "message": "m"}}')):
            with self.subTest(status=status):
                self.s.answer = lambda m, p: (status, {"Zygo-Api-Version": "2"}, body)
                with self.assertRaises(zygo.ApiVersionMismatch) as cm:
                    self.c.status()
                self.assertEqual(str(cm.exception), "the daemon speaks API version 2; this client speaks 1 (use a client of the daemon's release)")
        self.s.answer = lambda m, p: (200, {"Zygo-Api-Version": "1"}, b'{"api_version": 1}')
        self.assertEqual(self.c.status(), {"api_version": 1})

    def test_lists_follow_the_cursor(self):
        pages = {"": (["a", "b"], "c2"), "c2": (["c"], "c3"), "c3": ([], "")}

        def answer(m, p):
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(p).query)
            items, nxt = pages[q.get("cursor", [""])[0]]
            return 200, {}, json.dumps({"items": [{"name": n} for n in items], "next_cursor": nxt}).encode()

        self.s.answer = answer
        self.assertEqual([f["name"] for f in self.c.functions.list(page_size=2)], ["a", "b", "c"])
        self.assertEqual([p for _, p in self.s.requests],
                         ["/v1/functions?limit=2", "/v1/functions?limit=2&cursor=c2", "/v1/functions?limit=2&cursor=c3"])

    def test_a_list_without_the_envelope_is_an_error(self):
        self.s.answer = lambda m, p: (200, {}, b'[{"name": "a"}]')
        with self.assertRaisesRegex(zygo.ZygoError, "not a page of items"):
            self.c.sandboxes.list()

    def test_fork_whose_every_child_failed(self):
        ans = {"error": {"code": "unavailable", "message": "every child failed"},
               "children": [{"index": 0, "error": {"code": "unavailable", "message": "restore failed"}}]}
        self.s.answer = lambda m, p: (503, {}, json.dumps(ans).encode())
        sb = zygo.Sandbox(self.c._t, {"id": "sb-1"})
        with self.assertRaises(zygo.Unavailable) as cm:
            sb.fork(1)
        self.assertEqual(cm.exception.answer["children"][0]["error"]["message"], "restore failed")

    def test_stream_error_event(self):
        lines = [{"stream": "stdout", "data": "aGk="}, {"error": {"code": "failed_precondition", "message": "sandbox died"}}]
        body = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        self.s.answer = lambda m, p: (200, {"Content-Type": "application/x-ndjson"}, body)
        sb = zygo.Sandbox(self.c._t, {"id": "sb-1"})
        got = []
        with self.assertRaises(zygo.FailedPrecondition) as cm:
            for chunk in sb.exec_stream(["true"]):
                got.append(chunk.data)
        self.assertEqual((got, cm.exception.status, str(cm.exception)), ([b"hi"], 409, "sandbox died"))


class DiscoveryTest(unittest.TestCase):
    def setUp(self):
        self.env = {k: os.environ.get(k) for k in ("ZYGO_STATE_DIR", "ZYGO_ADDR", "ZYGO_TOKEN", "ZYGO_CA",
                                                   "XDG_STATE_HOME", "XDG_CONFIG_HOME")}
        for k in self.env:
            os.environ.pop(k, None)
        self.addCleanup(self.restore)
        self.cfg = tempfile.mkdtemp(prefix="zpy-cfg-")  # no context file unless a test writes one
        self.addCleanup(shutil.rmtree, self.cfg)
        os.environ["XDG_CONFIG_HOME"] = self.cfg

    def restore(self):
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def test_socket_rules(self):
        self.assertEqual(zygo.Zygo(state_dir="/s").where, "/s/zygo.sock")
        os.environ["ZYGO_STATE_DIR"] = "/env"
        self.assertEqual(zygo.Zygo().where, "/env/zygo.sock")
        self.assertEqual(zygo.Zygo(state_dir="/s").where, "/s/zygo.sock")
        self.assertEqual(zygo.Zygo(socket="/x.sock").where, "/x.sock")
        del os.environ["ZYGO_STATE_DIR"]
        want = "/var/lib/zygo" if os.geteuid() == 0 else os.path.expanduser("~/.local/state/zygo")
        self.assertEqual(zygo.Zygo().where, want + "/zygo.sock")

    def test_tcp_token_rules(self):
        d = tempfile.mkdtemp(prefix="zpy-t-")
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "api.token"), "w") as f:
            f.write("from-file\n")
        os.environ["ZYGO_ADDR"] = "127.0.0.1:9"
        self.assertEqual((zygo.Zygo(state_dir=d).where, zygo.Zygo(state_dir=d)._t.token), ("127.0.0.1:9", "from-file"))
        os.environ["ZYGO_TOKEN"] = "from-env"
        self.assertEqual(zygo.Zygo(state_dir=d)._t.token, "from-env")
        self.assertEqual(zygo.Zygo(state_dir=d, token="given")._t.token, "given")

    def test_context_file_precedence(self):
        os.makedirs(os.path.join(self.cfg, "zygo"))
        path = os.path.join(self.cfg, "zygo", "config.toml")
        with open(path, "w") as f:
            f.write('address = "10.0.0.1:8443"\ntoken = "from-ctx"\nca = "ca.pem"\nserver_name = "z.example"\n')
        os.chmod(path, 0o600)
        with self.assertRaises(zygo.ConfigError) as cm:  # the CA is read when the client is made
            zygo.Zygo()
        self.assertIn(f"{path}: the CA file {self.cfg}/zygo/ca.pem", str(cm.exception))
        cert, _ = self_signed(self.cfg)
        for name in ("zygo/ca.pem", "env-ca.pem", "arg-ca.pem"):
            shutil.copy(cert, os.path.join(self.cfg, name))
        t = zygo.Zygo(state_dir="/nonexistent").target
        self.assertEqual((t.addr, t.tls, t.token, t.ca, t.server_name),
                         ("10.0.0.1:8443", True, "from-ctx", os.path.join(self.cfg, "zygo", "ca.pem"), "z.example"))
        self.assertEqual(zygo.Zygo(socket="/x.sock").where, "/x.sock")  # an explicit socket beats the file
        # The same address given by the environment is the file's own: its token goes there.
        os.environ["ZYGO_ADDR"] = "10.0.0.1:8443"
        self.assertEqual(zygo.Zygo(state_dir="/nonexistent").target.token, "from-ctx")
        # Another one gets neither token nor server name; the CA still applies (it is no secret).
        os.environ["ZYGO_ADDR"] = "http://10.0.0.2:80"
        t = zygo.Zygo(state_dir="/nonexistent").target
        self.assertEqual((t.addr, t.tls, t.token, t.server_name, t.ca_from), ("10.0.0.2:80", False, "", "", path))
        t = zygo.Zygo(addr="10.0.0.3:1", state_dir="/nonexistent").target
        self.assertEqual((t.addr, t.tls, t.token, t.addr_from), ("10.0.0.3:1", True, "", "addr="))
        os.environ["ZYGO_CA"] = env_ca = os.path.join(self.cfg, "env-ca.pem")
        self.assertEqual(zygo.Zygo(addr="10.0.0.3:1", state_dir="/nonexistent").target.ca, env_ca)
        arg_ca = os.path.join(self.cfg, "arg-ca.pem")
        self.assertEqual(zygo.Zygo(addr="10.0.0.3:1", ca=arg_ca, state_dir="/nonexistent").target.ca, arg_ca)
        os.environ["ZYGO_TOKEN"] = "from-env"
        self.assertEqual(zygo.Zygo(state_dir="/nonexistent").target.token, "from-env")

    def test_a_context_file_that_does_not_parse(self):
        os.makedirs(os.path.join(self.cfg, "zygo"))
        path = os.path.join(self.cfg, "zygo", "config.toml")
        for body, want in (('address = "x\n', "reading the context file " + path),
                           ("address = 8443\n", f"the context file {path}: address must be a string"),
                           ('[server]\naddress = "x"\n', f"the context file {path}: unknown key 'server'")):
            with open(path, "w") as f:
                f.write(body)
            with self.assertRaises(zygo.ConfigError) as cm:
                zygo.Zygo()
            self.assertTrue(str(cm.exception).startswith(want), str(cm.exception))

    def test_a_socket_served_by_another_user_gets_no_byte(self):
        # A server running as uid 12345 (the test runs as root) counts what it receives.
        d = tempfile.mkdtemp(prefix="zpy-o-")
        self.addCleanup(shutil.rmtree, d)
        os.chmod(d, 0o777)
        # /usr/bin/python3: uid 12345 may not reach this interpreter (pyenv's lives under /root).
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        server = subprocess.Popen([py, "-c", (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); print('ready', flush=True)\n"
            "c, _ = s.accept(); c.settimeout(2); n = 0\n"
            "try:\n"
            "    while (b := c.recv(4096)): n += len(b)\n"
            "except OSError: pass\n"
            "print(n, flush=True)\n"), os.path.join(d, "zygo.sock")],
            user=12345, cwd="/", stdout=subprocess.PIPE, text=True)
        self.addCleanup(server.wait, 10)
        self.assertEqual(server.stdout.readline().strip(), "ready")
        with self.assertRaises(zygo.Unreachable) as cm:
            zygo.Zygo(state_dir=d).status()
        self.assertIn("served by uid 12345, neither root nor this user", str(cm.exception))
        self.assertEqual(server.stdout.readline().strip(), "0")

    def test_unreachable(self):
        d = tempfile.mkdtemp(prefix="zpy-n-")
        self.addCleanup(shutil.rmtree, d)
        with self.assertRaises(zygo.Unreachable) as cm:
            zygo.Zygo(state_dir=d).status()
        self.assertIn("no Zygo daemon answered on " + d + "/zygo.sock", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
