"""Loader of the compiled per-batch seam (native.c), with the pure-Python code as the fallback.

Role: compile `native.c` with the system C compiler (cc -O2 -shared) into a per-user cache the first
time a process needs it, load it with ctypes, and expose `LIB` (None when unavailable). The source
hash is in the file name, so an edited native.c is rebuilt; the build writes a temp file and
renames it, so concurrent worker processes never load a half-written library.

Selection: env `KOMPAKTCLEANER_IMPL` = `native` (default: use it when it builds) or `python`
(never load it). (Not `KOMPAKT_*`: those environment variables are broker configuration.)
Both implementations give identical output, byte for byte; tests run both.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile

log = logging.getLogger(__name__)

IMPL_ENV = "KOMPAKTCLEANER_IMPL"
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native.c")
_i64 = ctypes.c_int64
_p = ctypes.c_void_p
_cp = ctypes.c_char_p


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "kompakt")
    try:
        os.makedirs(d, exist_ok=True)
        return d
    except OSError:
        d = os.path.join(tempfile.gettempdir(), f"kompakt-{os.getuid()}")
        os.makedirs(d, exist_ok=True)
        return d


def _lib_name(src: bytes) -> str:
    """The library's file name; the source hash in it makes an edited native.c rebuild."""
    return f"kompakt_cleaner_{hashlib.sha256(src).hexdigest()[:16]}.so"


def _build() -> str | None:
    try:
        src = open(_SRC, "rb").read()
    except OSError:
        return None
    # A library compiled at install time (the container image has no compiler at run time).
    shipped = os.path.join(os.path.dirname(_SRC), _lib_name(src))
    if os.path.exists(shipped):
        return shipped
    target = os.path.join(_cache_dir(), _lib_name(src))
    if os.path.exists(target):
        return target
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
    os.close(fd)
    try:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, _SRC], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        os.replace(tmp, target)
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("cannot compile the cleaner's native seam (%s); using pure Python", exc)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return None


def _load():
    if os.environ.get(IMPL_ENV, "native").lower() == "python":
        return None
    path = _build()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        log.warning("cannot load %s (%s); using pure Python", path, exc)
        return None
    lib.km_md5.argtypes = [_cp, _i64, _p]
    lib.km_md5.restype = None
    lib.km_index.argtypes = [_cp, _i64, _i64, _i64, _i64, _i64, _p, _i64, _i64, _p]
    lib.km_index.restype = _i64
    lib.km_filter.argtypes = [_cp, _i64, _i64, _i64, _i64, _p, _i64, _i64, _i64, _p, _p]
    lib.km_filter.restype = _i64
    lib.km_map_put.argtypes = [_p, _i64, _cp, _i64, _p]
    lib.km_map_put.restype = None
    lib.km_map_get.argtypes = [_p, _i64, _cp, _p]
    lib.km_map_get.restype = _i64
    lib.km_md5_many.argtypes = [_i64, _cp, _p, _p]
    lib.km_md5_many.restype = None
    lib.km_crc32c.argtypes = [ctypes.c_uint32, _cp, _i64]
    lib.km_crc32c.restype = ctypes.c_uint32
    lib.km_index_range.argtypes = [_p, _i64, _i64, _i64, _p, _i64, _i64, _i64, _p]
    lib.km_index_range.restype = _i64
    lib.km_filter_range.argtypes = [_p, _i64, _p, _i64, _i64, _i64, _i64, _p, _i64, _p, _i64, _p, _i64,
                                    _p, _i64, _i64, _p]
    lib.km_filter_range.restype = _i64
    lib.km_prescan.argtypes = [_p, _i64, _i64, _i64, _p, _i64, _p, _i64, _i64, _p]
    lib.km_prescan.restype = _i64
    return lib


LIB = _load()


# return codes of the range loops (native.c)
RC_END, RC_FULL, RC_PYTHON, RC_STOP, RC_FLUSH, RC_BUDGET, RC_CORRUPT, RC_OVERFLOW = 0, 1, 2, 3, 4, 5, -1, -3


def md5(data: bytes) -> bytes:
    out = ctypes.create_string_buffer(16)
    LIB.km_md5(data, len(data), out)
    return out.raw


def md5_many(keys: list) -> list:
    """Digests of up to 32 keys through the eight-lane path (tests compare it with hashlib)."""
    if len(keys) > 32:   # km_md5_many's arrays hold 32: more would write past them
        raise ValueError(f"md5_many takes at most 32 keys, not {len(keys)}")
    lens = (ctypes.c_int64 * len(keys))(*[len(k) for k in keys])
    out = ctypes.create_string_buffer(16 * len(keys))
    LIB.km_md5_many(len(keys), b"".join(keys), lens, out)
    return [out.raw[16 * i:16 * i + 16] for i in range(len(keys))]


def install_beside_package() -> str:
    """Compile native.c next to this module, where `_build` looks first; returns the path.

    For images without a compiler at run time (docker/Dockerfile's build stage):
    `KOMPAKTCLEANER_IMPL=python python -P -c "from kompakt.cleaner.native import install_beside_package as i; print(i())"`
    (the variable keeps the import itself from compiling into the user's cache first).
    """
    src = open(_SRC, "rb").read()
    target = os.path.join(os.path.dirname(_SRC), _lib_name(src))
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler (cc or gcc) found: cannot prebuild the cleaner's native seam")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", target + ".tmp", _SRC], check=True, timeout=120)
    os.replace(target + ".tmp", target)
    return target
