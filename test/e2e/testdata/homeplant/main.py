"""Case from a third tester: HOME was the sandbox's shared /tmp, so one request could plant
a .pth (run by every python3 a later request starts) in ~/.local/lib/pythonX.Y/site-packages.

"plant" writes that .pth under the zygote's HOME (/tmp) and under the request's own HOME;
"run" starts python3 and reports whether any planted code ran in it, and what HOME and TMPDIR
the request had."""
import os
import subprocess
import sys

SITE = os.path.join(".local", "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
PTH = "import sys; sys.zygo_planted = True\n"


def handler(event, context):
    home, tmpdir = os.environ.get("HOME", ""), os.environ.get("TMPDIR", "")
    if event.get("action") == "plant":
        for root in ("/tmp", home):
            d = os.path.join(root, SITE)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "zz_planted.pth"), "w") as f:
                f.write(PTH)
        return {"home": home}
    out = subprocess.run([sys.executable, "-c", "import sys; print(getattr(sys, 'zygo_planted', False))"],
                         capture_output=True, text=True, timeout=10)
    return {"planted_ran": out.stdout.strip(), "home": home, "tmpdir": tmpdir, "stderr": out.stderr[-500:]}
