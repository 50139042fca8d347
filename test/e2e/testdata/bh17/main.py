# BH-17: buffered stdout written twice.
import sys
sys.stdout.write("warmup-marker\n")    # stdout is a pipe under Zygo: buffered, not flushed

def handler(event, context):
    print("child", event["id"])
    return "ok"
