"""The PEP 517 build backend of the zygo package: standard library only, so pip builds and
installs it where no package index is reachable (`pip install --no-index ./sdk/python`).

It builds a pure-Python wheel of the packages in PACKAGES (their .py files), an sdist of the
tree, and a PEP 660 editable wheel (a .pth file naming this directory). The metadata is
METADATA below; bump VERSION here.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "zygo"
VERSION = "0.1.0"
PACKAGES = ("zygo", "zygo_sandbox")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Python client of the Zygo daemon (functions and gVisor sandboxes), standard library only
License: Apache-2.0
Requires-Python: >=3.8
Description-Content-Type: text/markdown

"""
WHEEL = f"""Wheel-Version: 1.0
Generator: zygo_build {VERSION}
Root-Is-Purelib: true
Tag: py3-none-any
"""
DIST_INFO = f"{NAME}-{VERSION}.dist-info"


def _metadata() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return METADATA + f.read()


def _sources():
    """Yields (path in the wheel, path on disk) of every .py file of PACKAGES, sorted."""
    for pkg in PACKAGES:
        for root, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    disk = os.path.join(root, name)
                    yield os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk


class _Wheel:
    """A wheel being written: each file is recorded in RECORD with its sha256 and size."""

    def __init__(self, path):
        self.zf = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data):
        if isinstance(data, str):
            data = data.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{name},sha256={digest},{len(data)}")
        zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(zi, data)

    def close(self):
        self.add(f"{DIST_INFO}/METADATA", _metadata())
        self.add(f"{DIST_INFO}/WHEEL", WHEEL)
        self.add(f"{DIST_INFO}/top_level.txt", "\n".join(PACKAGES) + "\n")
        record = f"{DIST_INFO}/RECORD"
        self.zf.writestr(zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0)),
                         "\n".join(self.record + [f"{record},,"]) + "\n")
        self.zf.close()


def _wheel_name():
    return f"{NAME}-{VERSION}-py3-none-any.whl"


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(WHEEL)
    return DIST_INFO


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    w = _Wheel(os.path.join(wheel_directory, _wheel_name()))
    for name, disk in _sources():
        with open(disk, "rb") as f:
            w.add(name, f.read())
    w.close()
    return _wheel_name()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    w = _Wheel(os.path.join(wheel_directory, _wheel_name()))
    w.add(f"__editable__.{NAME}.pth", ROOT + "\n")
    w.close()
    return _wheel_name()


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size, ti.mode = len(pkg_info), 0o644
        tf.addfile(ti, io.BytesIO(pkg_info))
        for rel in ("pyproject.toml", "README.md", "backend/zygo_build.py"):
            tf.add(os.path.join(ROOT, rel), f"{base}/{rel}")
        for name, disk in _sources():
            tf.add(disk, f"{base}/{name}")
    return base + ".tar.gz"
