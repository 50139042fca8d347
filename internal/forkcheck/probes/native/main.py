"""zygo check functions: the native-randomness probe. libtoken.so (token.c, compiled by the
check) fills a 16-byte buffer from getrandom() when it is loaded, here at import; the
function runs with on_native_random = "spawn"."""
import ctypes
import os

_LIB = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtoken.so"))


def handler(event, context):
    buf = ctypes.create_string_buffer(16)
    _LIB.zygo_token(buf)
    return {"native buffer drawn at import (on_native_random = spawn)": buf.raw.hex()}
