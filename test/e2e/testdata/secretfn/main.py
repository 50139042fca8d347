import os, stat, time
AT_IMPORT = sorted(os.listdir("/run/secrets")) if os.path.isdir("/run/secrets") else None

def handler(event, context):
    action = event.get("action", "read")
    if action == "import":
        return AT_IMPORT
    if action == "read":
        st = os.stat("/run/secrets/API_KEY")
        return {"value": open("/run/secrets/API_KEY").read(), "mode": oct(stat.S_IMODE(st.st_mode)),
                "uid": st.st_uid, "env_has_it": any("s3cr3t" in v for v in os.environ.values())}
    if action == "leak":
        v = open("/run/secrets/API_KEY").read()
        print("the key is", v)
        raise RuntimeError("failed with key " + v)
    if action == "hold":
        time.sleep(event.get("seconds", 2))
        return open("/run/secrets/API_KEY").read()
