"""Bad input on secured listeners: each gets Kafka's error or a closed connection, one log line,
and the broker goes on serving everyone else (a witness client round-trips after each case).

Cases: wrong PLAIN password and wrong SCRAM password (SASL_AUTHENTICATION_FAILED, then closed),
an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), a SCRAM exchange cut off after the first
message, Produce before authenticating (closed, as Kafka), garbage instead of a TLS ClientHello,
an expired client certificate and one from a CA the broker does not trust (handshake refused),
and KIP-368: SaslAuthenticate v1 states the session lifetime (connections.max.reauth.ms), a
re-authentication on the same connection keeps it, another user may not take it over, and an
expired session is closed at its next request. The admin HTTP API of the same broker refuses a
state-changing call without its token (401) and `kompakt admin` passes it (--token or env var).
"""
from __future__ import annotations

import base64
import socket
import ssl
import struct
import time

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)

from security_support import Endpoint, confluent_conf, roundtrip_confluent, security_broker, unique, values

REAUTH_MS = 1500
ADMIN_TOKEN = "admin-t0ken"


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    extra = {"listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
             "admin.api.token": ADMIN_TOKEN}
    with security_broker(tmp_path_factory.mktemp("security-bad-input"), extra) as running:
        yield running


class Conn:
    """A raw Kafka connection (optionally TLS) speaking kafka-python's request classes."""

    def __init__(self, port: int, tls_ctx: ssl.SSLContext | None = None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = tls_ctx.wrap_socket(sock, server_hostname="127.0.0.1") if tls_ctx else sock
        self.cid = 0

    def call(self, msg, version: int, response_cls):
        self.cid += 1
        msg.with_header(correlation_id=self.cid, client_id="bad-input")
        payload = bytes(msg.encode(version=version, header=True))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = self.recv()
        if frame is None:
            return None
        cid = struct.unpack(">i", frame[:4])[0]
        assert cid == self.cid
        flexible = response_cls.flexible_version_q(version) and response_cls is not ApiVersionsResponse
        return response_cls.decode(frame[5:] if flexible else frame[4:], version=version)

    def recv(self):
        head = self._exact(4)
        return None if head is None else self._exact(struct.unpack(">i", head)[0])

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def closed(self) -> bool:
        return self._exact(1) is None

    def plain_login(self, user: str, password: str, version: int = 1):
        hs = self.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert hs.error_code == 0
        return self.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), version,
                         SaslAuthenticateResponse)

    def metadata_ok(self) -> bool:
        resp = self.call(MetadataRequest(version=1, topics=[]), 1, MetadataResponse)
        return resp is not None and resp.brokers

    def close(self):
        self.sock.close()


def log_lines(proc, needle: str) -> int:
    return sum(needle in line for line in proc.log_text().splitlines())


def wait_log(proc, needle: str, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n = log_lines(proc, needle)
        if n >= at_least:
            return n
        time.sleep(0.05)
    return log_lines(proc, needle)


@pytest.fixture
def witness(bad):
    """Everyone else still gets served: a SCRAM-over-TLS client round-trips after each case."""
    yield
    proc, _, _, eps = bad
    assert roundtrip_confluent(eps["sasl_ssl_scram"], unique("witness"), n=2) == values(2)


def test_wrong_plain_password(bad, witness):
    proc, _, ports, _ = bad
    before = log_lines(proc, "authentication failed from")
    c = Conn(ports["SASL_PLAINTEXT"])
    resp = c.plain_login("alice", "not-her-password")
    assert resp.error_code == 58 and resp.error_message == "Authentication failed: Invalid username or password"
    assert c.closed()
    assert wait_log(proc, "authentication failed from", before + 1) == before + 1
    assert "not-her-password" not in proc.log_text()


def test_wrong_scram_password_with_confluent(bad, witness):
    proc, _, _, eps = bad
    before = log_lines(proc, "authentication failed from")
    ep = eps["sasl_ssl_scram"]
    wrong = Endpoint(ep.bootstrap, ep.protocol, ca=ep.ca, mechanism=ep.mechanism, username="scrammy",
                     password="Wr0ngPassw0rd!", extra={"message.timeout.ms": 3000})
    from confluent_kafka import Producer
    errors = []
    p = Producer({**confluent_conf(wrong),
                  "error_cb": lambda e: errors.append(e)})
    p.produce(unique("never"), b"x")
    p.flush(5)
    assert any("Authentication failed" in e.str() for e in errors), errors
    assert wait_log(proc, "authentication failed from", before + 1) >= before + 1
    assert "Wr0ngPassw0rd!" not in proc.log_text()


def test_unsupported_mechanism(bad, witness):
    _, _, ports, _ = bad
    c = Conn(ports["SASL_PLAINTEXT"])
    resp = c.call(SaslHandshakeRequest(mechanism="GSSAPI"), 1, SaslHandshakeResponse)
    assert resp.error_code == 33 and set(resp.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert c.closed()


def test_scram_cut_off_midway(bad, witness):
    proc, _, ports, _ = bad
    c = Conn(ports["SASL_PLAINTEXT"])
    assert c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, SaslHandshakeResponse).error_code == 0
    first = c.call(SaslAuthenticateRequest(auth_bytes=b"n,,n=scrammy,r=abcdefgh"), 1, SaslAuthenticateResponse)
    assert first.error_code == 0 and first.auth_bytes.startswith(b"r=abcdefgh")
    # the client goes away before its final message; then a forged final message on a new exchange
    c.close()
    d = Conn(ports["SASL_PLAINTEXT"])
    d.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, SaslHandshakeResponse)
    d.call(SaslAuthenticateRequest(auth_bytes=b"n,,n=scrammy,r=abcdefgh"), 1, SaslAuthenticateResponse)
    forged = b"c=biws,r=abcdefgh-guess,p=" + base64.b64encode(b"\0" * 64)
    resp = d.call(SaslAuthenticateRequest(auth_bytes=forged), 1, SaslAuthenticateResponse)
    assert resp.error_code == 58 and d.closed()


def test_scram_client_first_without_the_n_flag(bad, witness):
    """Kafka's ScramMessages.ClientFirstMessage matches only the gs2 flag 'n' (no channel
    binding): 'y' ("the client supports it, thinks the server does not") and 'p=' are refused."""
    _, _, ports, _ = bad
    for first in (b"y,,n=scrammy,r=abcdefgh", b"p=tls-unique,,n=scrammy,r=abcdefgh"):
        c = Conn(ports["SASL_PLAINTEXT"])
        assert c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, SaslHandshakeResponse).error_code == 0
        resp = c.call(SaslAuthenticateRequest(auth_bytes=first), 1, SaslAuthenticateResponse)
        assert resp.error_code == 58 and c.closed(), first


def test_produce_before_authentication_closes(bad, witness):
    proc, _, ports, _ = bad
    before = log_lines(proc, "before SASL authentication completed")
    c = Conn(ports["SASL_PLAINTEXT"])
    assert c.call(ApiVersionsRequest(version=0), 0, ApiVersionsResponse).error_code == 0
    assert c.call(MetadataRequest(version=1, topics=[]), 1, MetadataResponse) is None   # closed, no answer
    assert wait_log(proc, "before SASL authentication completed", before + 1) == before + 1


@pytest.mark.parametrize("case", ["garbage", "expired", "untrusted", "no-certificate"])
def test_tls_handshake_refused(bad, witness, case):
    proc, pki, ports, _ = bad
    before = log_lines(proc, "TLS handshake failed")
    if case == "garbage":
        s = socket.create_connection(("127.0.0.1", ports["SSL"]), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n" * 4)
        received = b""
        while chunk := s.recv(4096):              # at most a TLS alert, then the close
            received += chunk
        s.close()
        assert len(received) < 64
    else:
        ctx = ssl.create_default_context(cafile=pki.ca_file)
        if case != "no-certificate":              # ssl.client.auth=required: none at all is refused too
            ctx.load_cert_chain(*(pki.expired if case == "expired" else pki.stranger))
        try:                                       # TLS 1.3: the refusal may only show at the first read
            answered = Conn(ports["MTLS"], ctx).call(ApiVersionsRequest(version=0), 0, ApiVersionsResponse)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            answered = None
        assert answered is None
    assert wait_log(proc, "TLS handshake failed", before + 1) == before + 1


def test_reauthentication_kip368(bad, witness):
    proc, _, ports, _ = bad
    c = Conn(ports["SASL_PLAINTEXT"])
    resp = c.plain_login("alice", "alice-pw")
    assert resp.error_code == 0 and resp.session_lifetime_ms == REAUTH_MS
    assert c.metadata_ok()
    # re-authenticate on the same connection before expiry: served on
    again = c.plain_login("alice", "alice-pw")
    assert again.error_code == 0 and again.session_lifetime_ms == REAUTH_MS
    assert c.metadata_ok()
    # a second re-authentication within a second of the last one's start is refused, the
    # connection served on (Kafka's KafkaChannel.maybeBeginServerReauthentication: the handshake
    # then reaches KafkaApis, which answers ILLEGAL_SASL_STATE)
    hs = c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert hs.error_code == 34
    assert c.metadata_ok()
    # another user may not take a connection over (its first re-authentication)
    t = Conn(ports["SASL_PLAINTEXT"])
    assert t.plain_login("alice", "alice-pw").error_code == 0
    takeover = t.plain_login("bob", "bob-pw")
    assert takeover.error_code == 58 and "Cannot change principals" in takeover.error_message
    assert t.closed()
    # a session left to expire is closed at its next request
    d = Conn(ports["SASL_PLAINTEXT"])
    assert d.plain_login("alice", "alice-pw").error_code == 0
    time.sleep(REAUTH_MS / 1000 + 0.3)
    assert d.call(MetadataRequest(version=1, topics=[]), 1, MetadataResponse) is None
    assert wait_log(proc, "expired (connections.max.reauth.ms)", 1) >= 1


def test_saslhandshake_on_a_plain_listener(bad):
    proc, _, _, _ = bad
    c = Conn(proc.port)
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse).error_code == 34
    assert c.metadata_ok()                        # ILLEGAL_SASL_STATE is an answer, not a close


def test_admin_api_token(bad):
    import os
    import subprocess
    import sys
    proc, _, _, eps = bad
    topic = unique("admin-token")
    assert roundtrip_confluent(eps["ssl"], topic, n=1) == values(1)
    cli = [sys.executable, "-m", "kompakt", "admin", "--url", proc.metrics_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
    refused = subprocess.run(cli + ["pause", topic, "0"], capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 1 and "error 401" in refused.stderr
    paused = subprocess.run(cli + ["--token", ADMIN_TOKEN, "pause", topic, "0"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert paused.returncode == 0, paused.stderr
    resumed = subprocess.run(cli + ["resume", topic, "0"], capture_output=True, text=True, timeout=60,
                             env={**env, "KOMPAKT_ADMIN_TOKEN": ADMIN_TOKEN})
    assert resumed.returncode == 0, resumed.stderr
    broker_lines = [ln for ln in proc.log_text().splitlines() if not ln.startswith("===== start")]  # not argv
    assert not any(ADMIN_TOKEN in ln or "alice-pw" in ln for ln in broker_lines)   # nor a JAAS password


def test_authentication_metrics(bad):
    """Successes and failures per listener and mechanism (the cases above ran on this broker)."""
    import urllib.request
    proc, _, _, _ = bad
    text = urllib.request.urlopen(f"{proc.metrics_url}/metrics", timeout=10).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("kompakt_broker_authentications_total{"):
            labels, value = line[len("kompakt_broker_authentications_total{"):].split("} ")
            counts[tuple(sorted(labels.split(",")))] = float(value)

    def n(listener, mechanism, result):
        return counts.get(tuple(sorted([f'listener="{listener}"', f'mechanism="{mechanism}"',
                                        f'result="{result}"'])), 0)
    assert n("SASL_PLAINTEXT", "PLAIN", "failure") >= 1 and n("SASL_PLAINTEXT", "PLAIN", "success") >= 1
    assert n("SASL_SSL", "SCRAM-SHA-512", "success") >= 1 and n("SASL_SSL", "SCRAM-SHA-512", "failure") >= 1
    assert n("SSL", "TLS", "failure") >= 1 and n("MTLS", "TLS", "failure") >= 2


def test_saslhandshake_v0_bare_tokens(bad):
    """After SaslHandshake v0 the SASL tokens travel bare (size + bytes, no request header), the
    pre-KIP-152 way; a good PLAIN token gets an empty token back and the connection is served,
    a bad one is closed (v0 has no error response)."""
    _, _, ports, _ = bad
    c = Conn(ports["SASL_PLAINTEXT"])
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse).error_code == 0
    token = b"\0alice\0alice-pw"
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    assert c.recv() == b""                        # an empty server token
    assert c.metadata_ok()
    d = Conn(ports["SASL_PLAINTEXT"])
    assert d.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse).error_code == 0
    bad_token = b"\0alice\0nope"
    d.sock.sendall(struct.pack(">i", len(bad_token)) + bad_token)
    assert d.recv() is None


def test_alter_user_scram_credentials_duplicates_and_first_failures(bad):
    """Kafka's ScramControlManager.alterCredentials: deletions then upsertions, a user's first
    failure is its answer, and a credential altered twice after passing is DUPLICATE_RESOURCE
    (nothing of that user applied). Two mechanisms of one user in one request (what
    kafka-configs.sh sends) are both applied here; Kafka's controller refuses that too."""
    from wire_support import Wire, req, sub as sub_of
    proc, _, _, _ = bad
    D, U = sub_of(51, "ScramCredentialDeletion"), sub_of(51, "ScramCredentialUpsertion")
    w = Wire(proc.port)

    def up(name, mechanism=1, iterations=4096):
        return U(name=name, mechanism=mechanism, iterations=iterations, salt=b"s" * 16, salted_password=b"p" * 32)

    def alter(deletions=(), upsertions=()):
        r = w.call(req(51, deletions=list(deletions), upsertions=list(upsertions)), 0)
        return {x.user: (x.error_code, x.error_message) for x in r.results}

    def mechanisms(name):
        r = w.call(req(50, users=[sub_of(50, "UserName")(name=name)]), 0)
        [res] = r.results
        return sorted(c.mechanism for c in res.credential_infos) if res.error_code == 0 else res.error_code

    try:
        twice = "A user credential cannot be altered twice in the same request"
        # the first failure wins: a missing credential deleted twice, too few iterations twice
        assert alter(deletions=[D(name="dup-ghost", mechanism=1)] * 2) == {
            "dup-ghost": (91, "Attempt to delete a user credential that does not exist")}
        assert alter(upsertions=[up("dup-weak", iterations=1)] * 2) == {"dup-weak": (93, "Too few iterations")}
        # the same credential twice after passing: DUPLICATE_RESOURCE, nothing of the user applied,
        # the other users of the request are
        assert alter(upsertions=[up("dup-a"), up("dup-a"), up("dup-ok")]) == {
            "dup-a": (92, twice), "dup-ok": (0, None)}
        assert mechanisms("dup-a") == 91 and mechanisms("dup-ok") == [1]
        assert alter(deletions=[D(name="dup-ok", mechanism=1)], upsertions=[up("dup-ok")]) == {"dup-ok": (92, twice)}
        assert mechanisms("dup-ok") == [1]
        # both mechanisms of one user: applied (kafka-configs.sh)
        assert alter(upsertions=[up("dup-both", 1), up("dup-both", 2)]) == {"dup-both": (0, None)}
        assert mechanisms("dup-both") == [1, 2]
    finally:
        w.close()
