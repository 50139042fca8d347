"""Issue 16, point 3: gRPC started at import (a server on a unix socket, and a channel to
it). gRPC's threads refuse the fork: the function runs in the fallback, and each request
calls through the import-time channel, which must work as in a plain interpreter."""
import os
import tempfile
from concurrent import futures

import grpc

SOCKET = os.path.join(tempfile.mkdtemp(prefix="zygo-grpc-"), "echo.sock")
METHOD = "/zygo.Echo/Echo"


def _echo(request, context):
    return b"echo:" + request


SERVER = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
SERVER.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "zygo.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)}),))
SERVER.add_insecure_port("unix:" + SOCKET)
SERVER.start()
CHANNEL = grpc.insecure_channel("unix:" + SOCKET)
ECHO = CHANNEL.unary_unary(METHOD)
assert ECHO(b"import", timeout=10) == b"echo:import"


def handler(event, context):
    return ECHO(event["id"].encode(), timeout=10).decode()
