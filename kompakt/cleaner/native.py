"""The cleaner's view of Kompakt's compiled seam (kompakt.native, whose cleaner.c holds its C code).

Role: re-export the loaded library (`LIB`, None when the pure-Python seam is in use) and give the
cleaner the range loops' return codes and two small test helpers. The loader itself lives in the
leaf package `kompakt.native` because storage uses the same library (produce-time record checks)
and storage must not import the cleaner.
"""
from __future__ import annotations

import ctypes

from kompakt.native import IMPL_ENV, LIB, install_beside_package, implementation  # noqa: F401

# return codes of the range loops (kompakt/native/cleaner.c)
RC_END, RC_FULL, RC_PYTHON, RC_STOP, RC_FLUSH, RC_BUDGET, RC_PAYLOAD, RC_COMPRESS = 0, 1, 2, 3, 4, 5, 6, 7
RC_CORRUPT, RC_OVERFLOW, RC_PAYLOAD_ERROR = -1, -3, -4


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
