"""Small JSON state files, written crash-safely: every file that holds what Kafka keeps in its
metadata log (ACLs and SCRAM credentials for broker/security; dynamic broker configs, client quotas,
group configs and feature levels, state_files.py).

Role: `write_json(path, obj)` = temp file (mode 0600: these files say who may do what, or hold
password hashes) + fsync + rename + directory fsync, so a crash leaves the old file or the new one,
never a torn one (a leftover `<path>.tmp` is ignored and overwritten). Each file carries a CRC32C
of its canonical body so a flipped byte is noticed: `read_json` returns None for a missing file
and raises `StoreCorruptError` (with the path and what is wrong) for a damaged one, which stops
the broker at start rather than silently dropping ACLs or users.

File layout (UTF-8 JSON, keys sorted): {"crc32c": <uint32 of the canonical JSON of "body">,
"body": <the owner's object>, "version": 1}.
"""
from __future__ import annotations

import json

import crc32c

from kompakt.storage.checkpoint import atomic_write

VERSION = 1


class StoreCorruptError(Exception):
    pass


def _canonical(body) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def write_json(path: str, body) -> None:
    doc = {"body": body, "crc32c": crc32c.crc32c(_canonical(body)), "version": VERSION}
    data = (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()
    atomic_write(path, data, mode=0o600, point="state_file_write")


def read_json(path: str):
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, NotADirectoryError):   # no file, or its log dir is not a dir (the
        return None                                    # log dir check then says so, by name)
    try:
        doc = json.loads(raw)
        body = doc["body"]
        ok = doc.get("version") == VERSION and doc["crc32c"] == crc32c.crc32c(_canonical(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreCorruptError(f"{path} is not a valid Kompakt state file ({exc}); restore it from a "
                                f"backup or remove it to start without its contents") from None
    if not ok:
        raise StoreCorruptError(f"{path} fails its checksum or has an unknown version; restore it from "
                                f"a backup or remove it to start without its contents")
    return body
