import glob, os

def handler(event, context):
    found = {}
    for pattern in ["/run/secrets/*", "/run/**/API_KEY", "/tmp/**/API_KEY"]:
        found[pattern] = glob.glob(pattern, recursive=True)
    return found
