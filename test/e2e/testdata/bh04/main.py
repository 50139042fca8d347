# BH-04: OpenSSL RAND_bytes identical in forked children.
import ssl
ssl.RAND_bytes(16)                 # instantiate OpenSSL's DRBG in the zygote

def handler(event, context):
    return ssl.RAND_bytes(16).hex()
