# BH-11: a lock held by another thread at fork time.
import logging, threading, time
extra = threading.Lock()
logging.basicConfig(level=logging.INFO)
def chatter():
    while True:
        with extra:
            logging.info("bg"); time.sleep(0.0005)
threading.Thread(target=chatter, name="chatter", daemon=True).start()

def handler(event, context):
    logging.info("child %s", event["id"])
    with extra:
        return "ok"
