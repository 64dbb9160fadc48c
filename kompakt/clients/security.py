"""TLS and SASL for the command-line clients, from a Kafka client properties file (--command-config).

Role: `ClientSecurity.load(path)` reads the keys kafka-topics.sh's `--command-config` file takes
(and librdkafka's spellings of them); `wrap(sock, host)` starts TLS on a connected socket and
`authenticate(conn)` runs SaslHandshake v1 + SaslAuthenticate (Kafka's KIP-152 flow, after
ApiVersions) for PLAIN (RFC 4616) or SCRAM-SHA-256/512 (RFC 5802 / 7677, the server's signature
checked).

    security.protocol                 PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    ssl.truststore.location           PEM CA file (ssl.truststore.type PEM); librdkafka: ssl.ca.location
    ssl.keystore.location             PEM key + certificate chain, for mutual TLS;
                                      librdkafka: ssl.certificate.location + ssl.key.location
    ssl.key.password                  the key's password, if it is encrypted
    ssl.endpoint.identification.algorithm   https (default: check the host name) or empty (do not)
    sasl.mechanism                    PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl.jaas.config                  ... required username="alice" password="...";
                                      librdkafka: sasl.username + sasl.password

Invariant: a key or value this client cannot honour (a JKS store, GSSAPI, an unknown protocol)
is refused with a message before any connection, never ignored.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import ssl

from kompakt.clients.cluster import BrokerError, CommandError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
SASL_AUTHENTICATION_FAILED = 58


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file: key=value (or key: value) lines, # and ! comments."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as exc:
        raise CommandError(f"cannot read --command-config {path}: {exc.strerror or exc}", 2) from None
    text = re.sub(r"\\\n\s*", "", text)     # a line ending in a backslash continues on the next
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        out[m.group(1) if m else line] = m.group(2).strip() if m else ""
    return out


def _jaas_option(jaas: str, name: str) -> str | None:
    m = re.search(rf'\b{name}\s*=\s*"((?:[^"\\]|\\.)*)"', jaas)
    return m.group(1).replace('\\"', '"').replace("\\\\", "\\") if m else None


class ClientSecurity:
    def __init__(self, protocol: str = "PLAINTEXT", context: ssl.SSLContext | None = None,
                 mechanism: str | None = None, username: str | None = None, password: str | None = None):
        self.protocol = protocol
        self.context = context
        self.mechanism = mechanism
        self.username = username
        self.password = password

    @classmethod
    def load(cls, path: str | None) -> ClientSecurity:
        if not path:
            return cls()
        props = read_properties(path)
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise CommandError(f"security.protocol={protocol} in {path}: expected one of {', '.join(PROTOCOLS)}", 2)
        context = _ssl_context(props, path) if protocol.endswith("SSL") else None
        mechanism = username = password = None
        if protocol.startswith("SASL"):
            mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
            if mechanism not in MECHANISMS:
                raise CommandError(f"sasl.mechanism={mechanism} in {path}: this client speaks "
                                   f"{', '.join(MECHANISMS)}", 2)
            jaas = props.get("sasl.jaas.config", "")
            username = _jaas_option(jaas, "username") or props.get("sasl.username")
            password = _jaas_option(jaas, "password") or props.get("sasl.password")
            if username is None or password is None:
                raise CommandError(f"{path}: SASL needs a user name and password: sasl.jaas.config=... "
                                   'required username="..." password="..."; (or sasl.username and sasl.password)', 2)
        return cls(protocol, context, mechanism, username, password)

    def wrap(self, sock, host: str):
        if self.context is None:
            return sock
        return self.context.wrap_socket(sock, server_hostname=host)

    def authenticate(self, conn) -> None:
        """SaslHandshake then SaslAuthenticate round trips on `conn` (a Connection after ApiVersions)."""
        if self.mechanism is None:
            return
        answer = conn.call(17, mechanism=self.mechanism)
        if answer.error_code:
            raise BrokerError(answer.error_code, f"the broker enables {', '.join(answer.mechanisms) or 'no mechanism'}",
                              f"SASL {self.mechanism} at {conn.address}")
        if self.mechanism == "PLAIN":
            self._round(conn, f"\0{self.username}\0{self.password}".encode())
            return
        scram = ScramClient(self.mechanism, self.username, self.password)
        server_first = self._round(conn, scram.first())
        server_final = self._round(conn, scram.final(server_first))
        scram.check(server_final)

    def _round(self, conn, data: bytes) -> bytes:
        answer = conn.call(36, auth_bytes=data)
        if answer.error_code:
            raise BrokerError(answer.error_code, answer.error_message, f"SASL {self.mechanism} as {self.username!r} "
                              f"at {conn.address}")
        return answer.auth_bytes


def _ssl_context(props: dict[str, str], path: str) -> ssl.SSLContext:
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(key, "PEM").upper() != "PEM":
            raise CommandError(f"{key}={props[key]} in {path}: this client reads PEM files only (convert with "
                               "keytool -exportcert -rfc / openssl pkcs12 -nodes)", 2)
    ca = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
    try:
        context = ssl.create_default_context(cafile=ca)
        if props.get("ssl.endpoint.identification.algorithm", "https") == "":
            context.check_hostname = False
        cert = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
        if cert:
            context.load_cert_chain(cert, props.get("ssl.key.location"),
                                    password=props.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"TLS settings in {path}: {exc}", 2) from None
    return context


class ScramClient:
    """One SCRAM exchange (RFC 5802) as the client: first(), final(server_first), check(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self.hash = MECHANISMS[mechanism]
        self.mechanism = mechanism
        name = username.replace("=", "=3D").replace(",", "=2C")
        self.nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self.first_bare = f"n={name},r={self.nonce}"
        self.password = password
        self.auth_message = b""
        self.salted = b""

    def first(self) -> bytes:
        return b"n,," + self.first_bare.encode()

    def final(self, server_first: bytes) -> bytes:
        fields = dict(f.split("=", 1) for f in server_first.decode().split(",") if "=" in f)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), int(fields.get("i", "0"))
        if not nonce.startswith(self.nonce) or salt is None or iterations < 1:
            raise CommandError(f"SASL {self.mechanism}: the broker's first message is not valid SCRAM", 1)
        self.salted = hashlib.pbkdf2_hmac(self.hash().name, self.password.encode(), base64.b64decode(salt), iterations)
        client_key = self._hmac(self.salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"      # biws = base64("n,,"): no channel binding
        self.auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = self._hmac(self.hash(client_key).digest(), self.auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        text = server_final.decode()
        if text.startswith("e="):
            raise BrokerError(SASL_AUTHENTICATION_FAILED, text[2:], f"SASL {self.mechanism}")
        expected = self._hmac(self._hmac(self.salted, b"Server Key"), self.auth_message)
        if not text.startswith("v=") or not hmac.compare_digest(base64.b64decode(text[2:]), expected):
            raise CommandError(f"SASL {self.mechanism}: the broker's signature does not match: it does not "
                               "know this password (a broker in the middle?)", 1)

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()
