"""SCRAM credentials: salted and hashed, in `kompakt-scram-credentials.json` in the first log dir.

Role: what AlterUserScramCredentials writes and SCRAM authentication reads. A client sends the
*salted password* (Hi(password, salt, iterations), computed client side); we keep only
    StoredKey = H(HMAC(SaltedPassword, "Client Key"))   ServerKey = HMAC(SaltedPassword, "Server Key")
with the salt and iteration count (RFC 5802), exactly what Kafka stores, so neither the password
nor the salted password is ever on disk or in memory after the call, nor in any log line.

Body: {"users": {"<user>": {"SCRAM-SHA-256": {"salt": b64, "stored_key": b64, "server_key": b64,
"iterations": n}, ...}}}. Every change rewrites the file crash-safely (metadata/store_file.write_json:
temp, fsync, rename, fsync dir; mode 0600) before it is acknowledged.

Kafka's limits: 4096 <= iterations <= 16384 (UNACCEPTABLE_CREDENTIAL otherwise); mechanism codes
1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from typing import NamedTuple

from kompakt.broker.metadata.store_file import read_json, write_json

SCRAM_FILE = "kompakt-scram-credentials.json"
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {v: k for k, v in MECHANISM_CODES.items()}
HASH_OF = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    h = HASH_OF[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    return ScramCredential(bytes(salt), hashlib.new(h, client_key).digest(),
                           hmac.new(salted_password, b"Server Key", h).digest(), iterations)


def credential_from_password(mechanism: str, password: str, iterations: int = 4096,
                             salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(HASH_OF[mechanism], password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salt, salted, iterations)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class ScramStore:
    def __init__(self, directory: str | None):
        self.path = os.path.join(directory, SCRAM_FILE) if directory else None
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = threading.Lock()       # changes run in worker threads (they fsync)
        body = read_json(self.path) if self.path else None
        for user, mechs in (body or {}).get("users", {}).items():
            self.users[user] = {m: ScramCredential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                                   base64.b64decode(c["server_key"]), int(c["iterations"]))
                                for m, c in mechs.items()}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def apply(self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]) -> None:
        """Apply a validated batch and persist it (blocking: call from a worker thread)."""
        with self._lock:
            users = {u: dict(m) for u, m in self.users.items()}
            for user, mechanism in deletions:
                users.get(user, {}).pop(mechanism, None)
                if user in users and not users[user]:
                    del users[user]
            for user, mechanism, credential in upserts:
                users.setdefault(user, {})[mechanism] = credential
            if self.path:
                write_json(self.path, {"users": {
                    u: {m: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key),
                            "iterations": c.iterations} for m, c in mechs.items()} for u, mechs in users.items()}})
            self.users = users
