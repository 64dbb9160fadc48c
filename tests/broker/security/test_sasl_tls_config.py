"""SASL mechanisms and the per-connection state machine (sans-io), principal mapping, JAAS lines,
listener maps and TLS configuration errors, without a broker."""
from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kompakt.broker.security.listeners import configured_listeners
from kompakt.broker.security.principal import BadCertificate, NoMatchingRule, PrincipalMapper, subject_dn
from kompakt.broker.security.sasl_mechanisms import AuthenticationFailed, PlainServer, ScramServer
from kompakt.broker.security.sasl_server import (AUTHENTICATED, FAILED, REAUTH_BAD_MECHANISM, IllegalSaslState,
                                                 SaslConfig, SaslServer, jaas_plain_users, transition)
from kompakt.broker.security.scram_store import ScramStore, credential_from_password
from kompakt.broker.security.tls import normalize_pem, openssl_cipher_name, server_context
from kompakt.config.broker_config import BrokerConfig, ConfigError


def scram_client(mechanism, user, password, server, nonce="clientnonce123", authzid="", reorder=False):
    """The client side of RFC 5802, written from the RFC, driving `server`."""
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    gs2 = f"n,{'a=' + authzid if authzid else ''},"
    first_bare = f"n={user},r={nonce}"
    server_first = server.step((gs2 + first_bare).encode()).decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    c = base64.b64encode(gs2.encode()).decode()
    without_proof = f"r={attrs['r']},c={c}" if reorder else f"c={c},r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    sig = hmac.new(hashlib.new(h, client_key).digest(), auth, h).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
    final = server.step(f"{without_proof},p={proof}".encode())
    server_key = hmac.new(salted, b"Server Key", h).digest()
    assert final == b"v=" + base64.b64encode(hmac.new(server_key, auth, h).digest())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(tmp_path, mechanism):
    store = ScramStore(str(tmp_path))
    store.apply([("ann", mechanism, credential_from_password(mechanism, "pw", 4096))], [])
    server = ScramServer(mechanism, ScramStore(str(tmp_path)).lookup)     # reloaded from disk
    scram_client(mechanism, "ann", "pw", server)
    assert server.complete and server.username == "ann"
    with pytest.raises(AuthenticationFailed):
        scram_client(mechanism, "ann", "nope", ScramServer(mechanism, store.lookup))
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
        ScramServer(mechanism, store.lookup).step(b"n,,n=nobody,r=x")
    other = "SCRAM-SHA-512" if mechanism == "SCRAM-SHA-256" else "SCRAM-SHA-256"
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):   # ann has no credential for it
        ScramServer(other, store.lookup).step(b"n,,n=ann,r=x")
    scram_client(mechanism, "ann", "pw", ScramServer(mechanism, store.lookup), authzid="ann")  # authzid = user
    with pytest.raises(AuthenticationFailed, match="authorization id that is different from username"):
        scram_client(mechanism, "ann", "pw", ScramServer(mechanism, store.lookup), authzid="root")
    with pytest.raises(AuthenticationFailed, match="expected c=...,r=...,p="):   # RFC 5802 attribute order
        scram_client(mechanism, "ann", "pw", ScramServer(mechanism, store.lookup), reorder=True)
    for first in (b"n,,n=ann,r=abc,tokenauth=true", b"n,,r=abc,n=ann", b"n,,n=ann,r=a b", b"p=tls-unique,,n=ann,r=x"):
        with pytest.raises(AuthenticationFailed):
            ScramServer(mechanism, store.lookup).step(first)
    text = (tmp_path / "kompakt-scram-credentials.json").read_text()
    assert '"stored_key"' in text and '"pw"' not in text and "salted" not in text


def test_plain_and_jaas():
    users = jaas_plain_users('org.apache.kafka.common.security.plain.PlainLoginModule required '
                             'username="admin" password="a" user_admin="a" user_carol="x\\"y" user_c=z;')
    assert users == {"admin": "a", "carol": 'x"y', "c": "z"}
    server = PlainServer({"alice": "s3cret"})
    assert server.step(b"\0alice\0s3cret") == b"" and server.username == "alice"
    for bad, message in ((b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
                         (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
                         (b"\0\0x", "Authentication failed: username not specified"),
                         (b"\0alice\0", "Authentication failed: password not specified"),
                         (b"\0alice\0s3cret\0more", "expected 3 tokens, got 4"),
                         (b"other\0alice\0s3cret", "authorization id that is different from username")):
        with pytest.raises(AuthenticationFailed, match=message):           # Kafka's PlainSaslServer messages
            PlainServer({"alice": "s3cret"}).step(bad)


def _sasl_config(**props):
    cfg = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "PLAIN",
                        "sasl.jaas.config": 'x required user_alice="pw" user_bob="pw2";', **props})
    return SaslConfig(configured_listeners(cfg)[0], None)


def test_state_machine_gate_and_reauth():
    now = [0.0]
    s = SaslServer(_sasl_config(**{"connections.max.reauth.ms": "1000"}), clock=lambda: now[0])
    assert s.admits(18) and s.admits(17) and not s.admits(36) and not s.admits(0)   # Kafka: handshake first
    assert s.handshake("PLAIN") == 0
    assert s.admits(36) and not s.admits(18) and not s.admits(0)        # only SaslAuthenticate now
    s.authenticate(b"\0alice\0pw")
    assert s.state == AUTHENTICATED and s.principal == "User:alice" and s.admits(0)
    assert s.session_lifetime_ms == 1000
    now[0] = 2.0
    assert not s.admits(0) and not s.admits(36) and s.admits(17)       # expired: only a re-authentication
    assert s.handshake("PLAIN") == 0
    assert s.admits(36) and not s.admits(0)                             # re-authenticating
    s.authenticate(b"\0alice\0pw")
    assert s.admits(0)
    now[0] = 2.9                                                        # < 1 s after the last one began
    assert s.handshake("PLAIN") == 34 and s.state == AUTHENTICATED and s.admits(0)
    now[0] = 3.0
    assert s.handshake("PLAIN") == 0
    with pytest.raises(AuthenticationFailed, match="Cannot change principals"):
        s.authenticate(b"\0bob\0pw2")
    assert s.state == FAILED and not s.admits(18)
    with pytest.raises(IllegalSaslState, match="Unexpected complete in SASL state HANDSHAKE"):
        transition("HANDSHAKE", "complete")
    fresh = SaslServer(_sasl_config())
    with pytest.raises(IllegalSaslState):                # SaslAuthenticate before any handshake
        fresh.authenticate(b"\0alice\0pw")
    assert fresh.state == FAILED


def test_answers_kafka_gives_once_authenticated():
    """Kafka's KafkaApis answers a SaslHandshake with re-authentication off, and a SaslAuthenticate
    outside an exchange, with ILLEGAL_SASL_STATE and keeps the connection (state not FAILED);
    re-authenticating with another enabled mechanism is accepted at the handshake and refused at
    SaslAuthenticate (REAUTH_BAD_MECHANISM); per-mechanism connections.max.reauth.ms wins."""
    s = SaslServer(_sasl_config())
    s.handshake("PLAIN")
    s.authenticate(b"\0alice\0pw")
    assert s.handshake("PLAIN") == 34 and s.state == AUTHENTICATED        # ILLEGAL_SASL_STATE, kept
    with pytest.raises(IllegalSaslState, match="after successful authentication"):
        s.authenticate(b"\0alice\0pw")
    assert s.state == AUTHENTICATED and s.admits(0)
    cfg = _sasl_config(**{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "connections.max.reauth.ms": "1000",
                          "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "5000"})
    r = SaslServer(cfg)
    r.handshake("PLAIN")
    r.authenticate(b"\0alice\0pw")
    assert r.session_lifetime_ms == 5000 and cfg.reauth_ms["SCRAM-SHA-256"] == 1000
    assert r.handshake("SCRAM-SHA-256") == 0 and r.state == REAUTH_BAD_MECHANISM
    with pytest.raises(AuthenticationFailed, match="not supported for re-authentication of mechanism 'PLAIN'"):
        r.authenticate(b"n,,n=alice,r=abc")
    assert r.state == FAILED
    u = SaslServer(cfg)
    assert u.handshake("GSSAPI") == 33 and u.state == FAILED             # UNSUPPORTED_SASL_MECHANISM


def test_no_usable_mechanism_is_a_config_error():
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms"):
        SaslConfig(configured_listeners(BrokerConfig({"listeners": "SASL_SSL://127.0.0.1:1"}))[0], None)


def _der_cert(*rdns) -> bytes:
    """A self-signed DER certificate whose subject is `rdns` (lists of (oid, value[, string tag]))
    in encoded order (first RDN first), built with cryptography (trustme's own dependency)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.name import _ASN1Type
    from cryptography.x509.oid import ObjectIdentifier

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.RelativeDistinguishedName([
        x509.NameAttribute(ObjectIdentifier(oid), value, *([_ASN1Type(tag[0])] if tag else []))
        for oid, value, *tag in rdn]) for rdn in rdns])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(7).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def test_subject_is_javas_rfc2253_name():
    """What Kafka's principal builder gets from X500Principal.getName(): last RDN first; CN, C, L,
    ST, O, OU, STREET, DC, UID by name; other types as OID=#hex of the DER value; `,=+<>#;"\\`
    escaped anywhere, leading/trailing spaces escaped; multi-valued RDNs joined by '+'."""
    CN, O, OU, C, DC, EMAIL, SERIAL = ("2.5.4.3", "2.5.4.10", "2.5.4.11", "2.5.4.6",
                                       "0.9.2342.19200300.100.1.25", "1.2.840.113549.1.9.1", "2.5.4.5")
    dn = subject_dn(_der_cert([(C, "US")], [(O, "Acme, Inc")], [(OU, "Testing cert #7a=b")], [(CN, "Alice")]))
    assert dn == "CN=Alice,OU=Testing cert \\#7a\\=b,O=Acme\\, Inc,C=US"
    dn = subject_dn(_der_cert([(DC, "example")], [(CN, "  bob ")], [(EMAIL, "bob@example.com", 0x16)],
                              [(SERIAL, "42", 0x13)]))
    assert dn == ("2.5.4.5=#13023432,1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,"
                  "CN=\\ \\ bob\\ ,DC=example")
    two = subject_dn(_der_cert([(CN, "carol"), (O, "Acme")]))      # DER sorts a SET: encoded order
    assert two in ("CN=carol+O=Acme", "O=Acme+CN=carol")
    with pytest.raises(BadCertificate):
        subject_dn(b"\x30\x05garbage")


def test_principal_mapping_rules_as_kafka():
    dn = "CN=Alice,O=Acme\\, Inc,C=US"
    assert PrincipalMapper("DEFAULT").name_for(dn) == dn
    assert PrincipalMapper("RULE:^CN=(.*?),O=.*$/$1/L, DEFAULT").name_for(dn) == "alice"
    assert PrincipalMapper("RULE:^CN=(.*?),O=.*$/$1/U").name_for(dn) == "ALICE"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^OU=x$/y/").name_for(dn)
    # Kafka's SslPrincipalMapperTest cases
    assert PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT").name_for(
        "CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert PrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L").name_for(
        "CN=Kafka1,OU=ServiceUsers,O=Org,L=Santa Clara,ST=CA,C=US") == "kafka1@serviceusers"
    assert PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,OU=.*|$)/$1/,DEFAULT").name_for(
        "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    for bad in ("DEFAULT/L", "DEFAUL", "RULE:CN=(.*?),OU=ServiceUsers.*/$1", "RULE:CN=(.*?),OU=ServiceUsers.*/$1/L/U",
                "RULE:CN=(.*?),OU=ServiceUsers.*/$1/LU", "RULE:broken", "RULE:^CN=x$/$1/"):
        with pytest.raises(ConfigError):
            PrincipalMapper(bad)
    # Java's replacement rules: a reference past the groups is text, $12 is group 1 then "2",
    # replaceAll replaces every match (an unanchored .* matches twice), \\$ is a dollar
    assert PrincipalMapper("RULE:^CN=(.*)$/$1@$4/").name_for("CN=a") == "a@$4"
    assert PrincipalMapper("RULE:^CN=(.*)$/$12/").name_for("CN=a") == "a2"
    assert PrincipalMapper("RULE:.*/x/").name_for("CN=a") == "xx"
    assert PrincipalMapper("RULE:^CN=(.*)$/\\$$1/").name_for("CN=a") == "$a"


def test_listener_map():
    cfg = BrokerConfig({"listeners": "CLIENT://:1,SECURE://:2", "listener.security.protocol.map":
                        "CLIENT:SASL_PLAINTEXT,SECURE:SSL",
                        "listener.name.secure.ssl.client.auth": "required", "ssl.client.auth": "none"})
    client, secure = configured_listeners(cfg)
    assert (client.protocol, secure.protocol) == ("SASL_PLAINTEXT", "SSL")
    assert secure.get("ssl.client.auth") == "required" and client.get("ssl.client.auth") == "none"
    with pytest.raises(ConfigError, match="No security protocol defined for listener OTHER"):
        configured_listeners(BrokerConfig({"listeners": "OTHER://:1",
                                           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}))


def test_kafkas_kraft_controller_listener_is_not_bound():
    # Kafka 4's shipped config/server.properties (combined broker + controller)
    cfg = BrokerConfig({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
                        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"})
    assert [(lst.name, lst.port) for lst in configured_listeners(cfg)] == [("PLAINTEXT", 9092)]
    with pytest.raises(ConfigError, match="no listener for Kafka clients: every entry is in controller"):
        configured_listeners(BrokerConfig({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER"}))
    with pytest.raises(ConfigError, match="no listener for Kafka clients: it is empty"):
        configured_listeners(BrokerConfig({"listeners": ""}))


def test_tls_configuration_errors(tmp_path, caplog):
    import trustme
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    pem = tmp_path / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    get = BrokerConfig({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem)}).__getitem__
    assert server_context(get, "SSL").verify_mode.name == "CERT_NONE"
    jks = BrokerConfig({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(tmp_path / "k.jks")})
    with pytest.raises(ConfigError, match="not supported: Kompakt reads PEM"):
        server_context(jks.__getitem__, "SSL")
    inline = BrokerConfig({"ssl.keystore.type": "PEM",
                           "ssl.keystore.certificate.chain": cert.cert_chain_pems[0].bytes().decode().replace("\n", " "),
                           "ssl.keystore.key": cert.private_key_pem.bytes().decode()})
    assert server_context(inline.__getitem__, "SSL") is not None        # one-line PEM text is repaired
    no_trust = BrokerConfig({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem),
                             "ssl.client.auth": "required"})
    with pytest.raises(ConfigError, match="needs a truststore"):
        server_context(no_trust.__getitem__, "SSL")
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    only12 = BrokerConfig({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem), "ssl.enabled.protocols": "TLSv1.2",
                           "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384"})
    with caplog.at_level("WARNING", logger="kompakt.broker.security.tls"):
        ctx = server_context(only12.__getitem__, "SSL")
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-RSA-AES128-GCM-SHA256"]
    import ssl
    assert ctx.options & ssl.OP_NO_RENEGOTIATION          # TLS 1.2 renegotiation refused (tls.py says why)
    assert "TLS_AES_256_GCM_SHA384" in caplog.text and "cannot restrict" in caplog.text
    assert normalize_pem("-----BEGIN X-----  QUJD  -----END X-----") == "-----BEGIN X-----\nQUJD\n-----END X-----\n"


def test_a_certificate_no_rule_maps_is_refused(tmp_path):
    """ListenerSecurity.open_session on an SSL listener with client certificates: the principal
    comes from the peer certificate's DER subject; without a matching rule (no DEFAULT) the
    connection is refused (None) with one WARNING line."""
    import trustme

    from kompakt.broker.security.setup import build_listeners
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cfg = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                        "ssl.keystore.location": str(tmp_path / "server.pem"), "ssl.client.auth": "required",
                        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "ca.pem"),
                        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/"})
    [sec] = build_listeners(cfg)
    CN = "2.5.4.3"

    class PeerTransport:                  # what a TLS transport (network/tls_transport.py) answers about the peer
        def __init__(self, der):
            self.der = der

        def get_extra_info(self, name):
            return type("SSLObject", (), {"getpeercert": lambda _self, binary_form=False: self.der})() \
                if name == "ssl_object" else None

    ok = sec.open_session(PeerTransport(_der_cert([("2.5.4.10", "Acme")], [(CN, "alice")])), "10.0.0.1", "peer", None)
    assert ok.principal == "User:alice" and ok.client_host == "10.0.0.1"
    assert sec.open_session(PeerTransport(_der_cert([("2.5.4.10", "Acme")], [(CN, "Zed")])), "h", "peer", None) is None
    assert sec.open_session(PeerTransport(None), "h", "peer", None).principal == "User:ANONYMOUS"
