"""SASL mechanisms, server side, sans-io: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

Each mechanism object is one authentication exchange: `step(client_bytes) -> server_bytes`
until `complete`; then `username` is the authenticated name. A bad message or wrong credentials
raise `AuthenticationFailed(message)`, whose message is what Kafka puts in the
SaslAuthenticate response (never the password, nor anything derived from it).

SCRAM exchange (two steps; the third message is the server's final answer):
    client-first   n,[a=<authzid>],n=<user>,r=<cnonce>     (no channel binding; an authzid must be
                                                           the user, as Kafka; no extensions: Kafka's
                                                           only one, tokenauth, is for delegation tokens)
    server-first   r=<cnonce><snonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 of the gs2 header "n,[a=..],">,r=<cnonce><snonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>
The attributes come in that order (RFC 5802 section 7); a nonce is printable ASCII without ','.
ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); it must hash to StoredKey.
librdkafka before 2.6.1 sends r=<cnonce><cnonce><snonce> in client-final (its bug #4895); as
Kafka 3.8.1-3.9 did, that exact form is accepted too (the server nonce is still required).
AuthMessage = client-first-bare "," server-first "," client-final-without-proof.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from kompakt.broker.security.scram_store import ScramCredential

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationFailed(Exception):
    pass


class PlainServer:
    """RFC 4616: one message `authzid NUL authcid NUL passwd` checked against the JAAS users."""
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]):
        self.users = users
        self.complete = False
        self.username: str | None = None

    def step(self, data: bytes) -> bytes:
        try:
            parts = bytes(data).decode("utf-8").split("\0", 3)      # Kafka reads at most 4 tokens
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        # compare_digest on equal-length digests: no timing hint about the stored password
        if expected is None or not hmac.compare_digest(hashlib.sha256(password.encode()).digest(),
                                                       hashlib.sha256(expected.encode()).digest()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.username, self.complete = user, True
        return b""


def _sasl_name(text: str) -> str:
    """SCRAM's saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is invalid."""
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("Invalid username in SCRAM client-first message")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    """`a=x,b=y` -> {"a": "x", "b": "y"} in message order; a malformed or repeated attribute fails."""
    out = {}
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=" or item[0] in out:
            raise AuthenticationFailed(f"Invalid SCRAM message attribute {item[:16]!r}")
        out[item[0]] = item[2:]
    return out


_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")       # RFC 5802 printable: ASCII 0x21-0x7E but ','



class ScramServer:
    """One SCRAM-SHA-256/512 exchange; `lookup(user, mechanism) -> ScramCredential | None`."""

    def __init__(self, mechanism: str, lookup):
        self.mechanism = mechanism
        self.hash = SCRAM_HASHES[mechanism]
        self.lookup = lookup
        self.complete = False
        self.username: str | None = None
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._first_bare = self._server_first = self._nonce = self._client_nonce = self._gs2 = ""

    def step(self, data: bytes) -> bytes:
        try:
            message = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        if self._state == "first":
            return self._client_first(message)
        if self._state == "final":
            return self._client_final(message)
        raise AuthenticationFailed("Unexpected SCRAM message after the exchange completed")

    def _client_first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        # gs2 flag 'n' only (Kafka's ClientFirstMessage pattern): 'y' and 'p=' are channel binding
        if len(parts) != 3 or parts[0] != "n" or not (parts[1] == "" or parts[1].startswith("a=")):
            raise AuthenticationFailed("Invalid SCRAM client-first message (channel binding is not supported)")
        self._gs2 = parts[0] + "," + parts[1] + ","
        self._first_bare = parts[2]
        attrs = _attributes(parts[2])
        if list(attrs) != ["n", "r"] or not _NONCE.fullmatch(attrs["r"]):
            raise AuthenticationFailed("Invalid SCRAM client-first message: expected n=<user>,r=<nonce> "
                                       "(extensions such as delegation tokens are not supported)")
        user = _sasl_name(attrs["n"])
        if parts[1] and _sasl_name(parts[1][2:]) != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        credential = self.lookup(user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.username, self._credential = user, credential
        self._client_nonce = attrs["r"]
        self._nonce = attrs["r"] + secrets.token_hex(16)      # alphanumeric, as Kafka's
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Invalid SCRAM client-final message: no proof")
        attrs = _attributes(without_proof)
        if list(attrs) != ["c", "r"]:
            raise AuthenticationFailed("Invalid SCRAM client-final message: expected c=...,r=...,p=...")
        if attrs.get("r") not in (self._nonce, self._client_nonce + self._nonce):
            raise AuthenticationFailed("Invalid SCRAM client-final message: nonce mismatch")
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client-final message: channel binding mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client-final message: proof is not base64") from None
        cred = self._credential
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(cred.stored_key, auth_message, self.hash).digest()
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self._state, self.complete = "done", True
        server_signature = hmac.new(cred.server_key, auth_message, self.hash).digest()
        return b"v=" + base64.b64encode(server_signature)
