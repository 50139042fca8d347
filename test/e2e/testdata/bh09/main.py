# BH-09: time-based uuid1 duplicates after fork.
import uuid
uuid.uuid1()                       # initialise clock-seq / last-timestamp state in the zygote

def handler(event, context):
    return [str(uuid.uuid1()) for _ in range(3)]
