"""The CLI clients' SCRAM exchange against RFC 7677's SCRAM-SHA-256 example (section 3), byte for
byte, and the properties file reader on what kafka-topics.sh's --command-config files contain."""
from __future__ import annotations

import pytest

from kompakt.clients.cluster import CommandError
from kompakt.clients.security import ClientSecurity, ScramClient, read_properties

# RFC 7677 section 3: user "user", password "pencil"
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_matches_rfc_7677():
    scram = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert scram.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.final(SERVER_FIRST) == CLIENT_FINAL
    scram.check(SERVER_FINAL)


def test_scram_refuses_a_wrong_server_signature_and_a_foreign_nonce():
    scram = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    scram.final(SERVER_FIRST)
    with pytest.raises(CommandError, match="signature does not match"):
        scram.check(b"v=" + b"A" * 44)
    with pytest.raises(CommandError, match="not valid SCRAM"):
        ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE).final(b"r=other,s=W22Z,i=4096")


def test_user_names_are_escaped():
    assert ScramClient("SCRAM-SHA-512", "a=b,c", "p", nonce="n").first() == b"n,,n=a=3Db=2Cc,r=n"


def test_properties_as_kafka_writes_them(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("# comment\n! also a comment\nsecurity.protocol = SASL_PLAINTEXT\nsasl.mechanism: PLAIN\n"
                 "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                 '    username="alice" password="a=\\"b";\n')
    assert read_properties(str(f))["sasl.mechanism"] == "PLAIN"
    security = ClientSecurity.load(str(f))
    assert (security.protocol, security.mechanism, security.username, security.password) == \
        ("SASL_PLAINTEXT", "PLAIN", "alice", 'a="b')
    assert security.context is None


@pytest.mark.parametrize("text, message", [
    ("security.protocol=SASL_SCRAM\n", "expected one of"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", "this client speaks"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "needs a user name and password"),
    ("security.protocol=SSL\nssl.keystore.type=PKCS12\n", "PEM files only"),
])
def test_settings_this_client_cannot_honour_are_refused(tmp_path, text, message):
    f = tmp_path / "client.properties"
    f.write_text(text)
    with pytest.raises(CommandError, match=message) as info:
        ClientSecurity.load(str(f))
    assert info.value.exit_code == 2
