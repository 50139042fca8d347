# BH-19: temp-file names repeat across siblings. /tmp stands for the shared
# directory: it is one folder for every child of the zygote.
import os, tempfile
next(tempfile._get_candidate_names())              # name generator initialised pre-fork
os.makedirs("/tmp/shared", exist_ok=True)

def handler(event, context):
    name = next(tempfile._get_candidate_names())
    path = os.path.join("/tmp/shared", "job-" + name)
    with open(path, "x") as f: f.write(event["id"])
    return path, tempfile.gettempdir(), open(path).read()
