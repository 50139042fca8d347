# BH-14: asyncio event loop and epoll fd inherited by the child.
import asyncio, os
loop = asyncio.new_event_loop(); asyncio.set_event_loop(loop)
loop.call_later(3600, print, "zygote timer")
loop.run_until_complete(asyncio.sleep(0))

def handler(event, context):
    eps = 0
    for fd in os.listdir("/proc/self/fd"):
        try: eps += "eventpoll" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError: pass
    async def work():
        await asyncio.sleep(0.01); return "ok"
    return asyncio.run(work()), eps
