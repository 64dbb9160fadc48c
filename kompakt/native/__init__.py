"""Kompakt's compiled seam: a small C library built on first use, with pure Python as the fallback.

Role: compile the C sources of this package (`*.c`, `common.h`) with the system C compiler
(cc -O2 -shared) into a per-user cache the first time a process needs them, load the library with
ctypes, declare its entry points and expose `LIB` (None when unavailable). Its users keep a pure
Python implementation of everything in it, the reference the C code is tested against:
  - records.c  LogValidator's per-record checks on produce (kompakt.storage.record_check);
  - cleaner.c  the cleaner's MD5, offset map, per-batch index/filter and whole-segment loops
               (kompakt.cleaner.batch_ops, offset_map, cleaner);
  - keys.c     keys and offsets of a log as Arrow buffers, for exact compaction
               (kompakt.pipeline.keyscan);
  - crc32c.c   CRC-32C (SSE4.2 or a table), used by all of them;
  - flusher.c  the group commit's sync thread, which never needs the GIL
               (kompakt.storage.group_commit; its Python flusher thread is the fallback).
  - tls.c      TLS records decrypted in one call that drops the GIL once, for the TLS layer's
               worker threads (kompakt.broker.network.tls_records; SSLObject.read is the reference
               and the fallback: decryption then stays on the event loop).

A leaf package: it imports nothing of Kompakt's, so every package may use it (storage, cleaner,
pipeline) without breaking the data-flow rule (storage never imports the cleaner). The sources'
hash is in the library's file name, so edited sources rebuild; the build writes a temp file and
renames it, so concurrent processes never load a half-written library.

Selection: environment variable `KOMPAKTNATIVE_IMPL` = `native` (default: use the library when it
builds) or `python` (never load it); `KOMPAKTCLEANER_IMPL`, the name from when only the cleaner
used it, is still read when the new one is unset. (Not `KOMPAKT_*`: those are broker configuration.)
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile

log = logging.getLogger(__name__)

IMPL_ENV = "KOMPAKTNATIVE_IMPL"
OLD_IMPL_ENV = "KOMPAKTCLEANER_IMPL"
_DIR = os.path.dirname(os.path.abspath(__file__))
_i64 = ctypes.c_int64
_p = ctypes.c_void_p
_cp = ctypes.c_char_p


def sources() -> list[str]:
    """The C sources compiled into the library, in a fixed order."""
    return sorted(glob.glob(os.path.join(_DIR, "*.c")))


def _source_hash() -> str | None:
    h = hashlib.sha256()
    try:
        for path in sources() + [os.path.join(_DIR, "common.h")]:
            h.update(os.path.basename(path).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    except OSError:
        return None
    return h.hexdigest()[:16]


def _lib_name(digest: str) -> str:
    return f"kompakt_native_{digest}.so"


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


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _compile(cc: str, target: str) -> None:
    """cc into a temp file beside `target`, then rename (never a half-written library)."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
    os.close(fd)
    try:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", _DIR, "-o", tmp, *sources()], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)
        # mkstemp made it 0600: a library prebuilt by root (docker/Dockerfile) must load as any user
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _build() -> str | None:
    digest = _source_hash()
    if digest is None:
        return None
    # a library compiled at install time (the container image has no compiler at run time)
    shipped = os.path.join(_DIR, _lib_name(digest))
    if os.path.exists(shipped):
        return shipped
    target = os.path.join(_cache_dir(), _lib_name(digest))
    if os.path.exists(target):
        return target
    cc = _compiler()
    if cc is None:
        return None
    try:
        _compile(cc, target)
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        log.warning("cannot compile Kompakt's native seam (%s %s); using pure Python", exc,
                    detail.decode(errors="replace")[:2000])
        return None


def _declare(lib) -> None:
    """Argument and result types of every entry point (the C sources document each)."""
    sig = {
        # crc32c.c
        "km_crc32c": ([ctypes.c_uint32, _cp, _i64], ctypes.c_uint32),
        # records.c
        "km_check_records": ([_p, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _p], _i64),
        # cleaner.c
        "km_md5": ([_cp, _i64, _p], None),
        "km_md5_many": ([_i64, _cp, _p, _p], None),
        "km_md5_variant": ([_i64], _i64),
        "km_map_put": ([_p, _i64, _cp, _i64, _p], None),
        "km_map_get": ([_p, _i64, _cp, _p], _i64),
        "km_index": ([_cp, _i64, _i64, _i64, _i64, _i64, _p, _i64, _i64, _p], _i64),
        "km_filter": ([_cp, _i64, _i64, _i64, _i64, _p, _i64, _i64, _i64, _p, _p], _i64),
        "km_index_range": ([_p, _i64, _i64, _i64, _p, _i64, _i64, _i64, _p, _p, _p, _p, _i64], _i64),
        "km_filter_range": ([_p, _i64, _p, _i64, _i64, _i64, _i64, _i64, _p, _i64, _p, _i64, _p,
                             _i64, _p, _i64, _i64, _p, _p, _p, _p, _i64, _i64, _p, _i64, _cp, _i64], _i64),
        "km_prescan": ([_p, _i64, _i64, _i64, _p, _i64, _p, _i64, _i64, _p], _i64),
        "km_batch_walk": ([_p, _i64, _p, _p, _p, _i64, _p], _i64),
        # keys.c
        "km_keys_range": ([_p, _i64, _i64, _i64, _i64, _p, _p, _p, _p, _i64, _i64, _p, _p, _p, _i64, _p], _i64),
        "km_offsets_to_bits": ([_p, _i64, _i64, _i64, _p], _i64),
        # flusher.c
        "km_flusher_new": ([ctypes.c_int], _p),
        "km_flusher_submit": ([_p, _p, _p, _i64], _i64),
        "km_flusher_take": ([_p, _p, _p], _i64),
        "km_flusher_free": ([_p], None),
        # tls.c
        "km_tls_read": ([_p, _p, _p, _p, _i64, _p], _i64),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def _wanted() -> bool:
    choice = os.environ.get(IMPL_ENV) or os.environ.get(OLD_IMPL_ENV) or "native"
    return choice.lower() != "python"


def _load():
    if not _wanted():
        return None
    path = _build()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        _declare(lib)
    except (OSError, AttributeError) as exc:
        log.warning("cannot load %s (%s); using pure Python", path, exc)
        return None
    return lib


LIB = _load()
# The same library through ctypes.PyDLL: its calls keep the GIL. For the short, non-blocking entry
# points the event loop calls per request or per round (km_flusher_submit/take): a CDLL call drops
# the GIL and must take it back, a hand-over another thread may win, so the loop would wait for it.
GIL_LIB = None
if LIB is not None:
    GIL_LIB = ctypes.PyDLL(LIB._name)
    _declare(GIL_LIB)


def implementation() -> str:
    return "native" if LIB is not None else "python"


def install_beside_package() -> str:
    """Compile the library next to this module, where `_build` looks first; returns the path.

    For images without a compiler at run time (docker/Dockerfile's build stage):
    `KOMPAKTNATIVE_IMPL=python python -P -c "from kompakt.native import install_beside_package as i; print(i())"`
    (the variable keeps the import itself from compiling into the user's cache first).
    """
    cc = _compiler()
    if cc is None:
        raise SystemExit("no C compiler (cc or gcc) found: cannot prebuild Kompakt's native seam")
    target = os.path.join(_DIR, _lib_name(_source_hash()))
    _compile(cc, target)
    return target
