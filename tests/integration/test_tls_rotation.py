"""Certificate rotation without a restart (Kafka's dynamic listener keystore update): a per-broker
`listener.name.ssl.ssl.keystore.location` set with IncrementalAlterConfigs on the BROKER resource
is checked by building the new TLS context (a missing file is refused, nothing saved), must keep
the certificate's subject and SubjectAltNames (a different SAN is refused), and then new TLS
connections get the new certificate while established ones keep working; the setting survives a
restart. Real broker, trustme certificates, confluent-kafka clients and Python ssl sockets.
"""
from __future__ import annotations

import contextlib
import os
import socket
import ssl

import pytest
import trustme
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from cryptography import x509

from broker_process import BrokerProcess
from kompakt.broker.metadata.store_file import read_json
from kompakt.broker.metadata.state_files import BROKER_CONFIGS_FILE
from security_support import Pki
from wire_support import Wire, req

KEY = "listener.name.ssl.ssl.keystore.location"
IDENTITY = dict(common_name="kompakt-broker", organization_name="Kompakt", organization_unit_name="brokers")


def _write(cert, path) -> tuple[str, bytes]:
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    return str(path), ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def _serial(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def _tls_socket(port: int, ca: str, server_hostname: str) -> ssl.SSLSocket:
    """A verified TLS connection; server_hostname "127.0.0.1" sends no SNI, "localhost" does."""
    ctx = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname=server_hostname)


def _peer_serial(port: int, ca: str, server_hostname: str = "127.0.0.1") -> int:
    with _tls_socket(port, ca, server_hostname) as s:
        return _serial(s.getpeercert(binary_form=True))


def _set(admin, value: str, key: str = KEY):
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])]).values()
    return future.result(30)


def _stored(proc) -> dict:
    """The saved per-broker layer (kompakt-broker-configs.json)."""
    return (read_json(os.path.join(proc.log_dir, BROKER_CONFIGS_FILE)) or {}).get("broker") or {}


def _round_trip(producer: Producer, ssl_conf: dict, topic: str, value: bytes) -> None:
    producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**ssl_conf, "group.id": f"g-{value.decode()}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        seen = []
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
                if value in seen:
                    break
        assert value in seen, seen
    finally:
        consumer.close()


@contextlib.contextmanager
def _tls_broker(tmp_path, keys: dict):
    """A broker with the harness's PLAINTEXT listener (admin) and an SSL listener: (proc, SSL port)."""
    proc = BrokerProcess(tmp_path / "broker", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL", "listener.name.ssl.ssl.keystore.type": "PEM",
        "num.partitions": "1", "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0", **keys})
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
    proc.start()
    try:
        yield proc, proc.ports["SSL"]
    finally:
        try:
            proc.stop()
        except RuntimeError:
            proc.kill()


def test_keystore_rotation_takes_effect_for_new_connections_and_survives_restart(tmp_path):
    pki = Pki(tmp_path / "pki")
    old_pem, old_der = _write(pki.ca.issue_cert("127.0.0.1", "localhost", **IDENTITY), tmp_path / "old.pem")
    new_pem, new_der = _write(pki.ca.issue_cert("127.0.0.1", "localhost", **IDENTITY), tmp_path / "new.pem")
    other_san, _ = _write(pki.ca.issue_cert("127.0.0.1", "elsewhere.example", **IDENTITY), tmp_path / "san.pem")
    assert _serial(old_der) != _serial(new_der)
    with _tls_broker(tmp_path, {KEY: old_pem}) as (proc, ssl_port):
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        ssl_conf = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                    "ssl.ca.location": pki.ca_file}
        producer = Producer(ssl_conf)
        _round_trip(producer, ssl_conf, "rot", b"before")
        assert _peer_serial(ssl_port, pki.ca_file) == _serial(old_der)
        established = _tls_socket(ssl_port, pki.ca_file, "localhost")

        _set(admin, new_pem)
        # new handshakes, with and without SNI, present the new certificate
        assert _peer_serial(ssl_port, pki.ca_file) == _serial(new_der)
        assert _peer_serial(ssl_port, pki.ca_file, "localhost") == _serial(new_der)
        # the connection made before keeps its certificate and keeps working
        assert _serial(established.getpeercert(binary_form=True)) == _serial(old_der)
        wire = Wire(None, sock=established)
        assert wire.call(req(18), 0).error_code == 0             # ApiVersions on the old connection
        wire.close()
        _round_trip(producer, ssl_conf, "rot", b"after")        # the producer made before, a new consumer
        assert _stored(proc)[KEY] == new_pem

        # a keystore with another SubjectAltName is refused, so is a missing file: nothing saved or changed
        for value, cause in ((other_san, "SubjectAltName does not match"),
                             (str(tmp_path / "nope.pem"), "does not exist")):
            with pytest.raises(KafkaException) as caught:
                _set(admin, value)
            err = caught.value.args[0]
            assert err.code() == 42 and cause in err.str(), err     # INVALID_REQUEST with the cause
            assert _stored(proc)[KEY] == new_pem
            assert _peer_serial(ssl_port, pki.ca_file) == _serial(new_der)
        producer.flush(5)
        del producer

        proc.restart()
        assert _peer_serial(ssl_port, pki.ca_file) == _serial(new_der)
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
        assert future.result(30)[KEY].value == new_pem
        _round_trip(Producer(ssl_conf), ssl_conf, "rot", b"restarted")

        # the rotated file is gone at the next start: an ERROR line, server.properties' keystore
        # is served (never a failed start), and setting a keystore again applies it
        os.remove(new_pem)
        proc.restart()
        assert "keystore/truststore set dynamically cannot be loaded" in proc.log_text()
        assert _peer_serial(ssl_port, pki.ca_file) == _serial(old_der)
        again_pem, again_der = _write(pki.ca.issue_cert("127.0.0.1", "localhost", **IDENTITY), tmp_path / "again.pem")
        _set(AdminClient({"bootstrap.servers": proc.bootstrap}), again_pem)
        assert _peer_serial(ssl_port, pki.ca_file) == _serial(again_der)


def _client_accepted(port: int, ca: str, cert: tuple[str, str]) -> bool:
    """Does the broker serve a request on a new connection presenting this client certificate?
    (With TLS 1.3 a refused certificate shows at the first read, not in the handshake.)"""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(*cert)
    try:
        sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="127.0.0.1")
        wire = Wire(None, sock=sock)
        try:
            return wire.call(req(18), 0).error_code == 0
        finally:
            wire.close()
    except (ssl.SSLError, OSError, AssertionError):
        return False


def test_truststore_rotation_decides_which_client_certificates_new_connections_accept(tmp_path):
    """Mutual TLS: the truststore set at run time replaces the old one for new handshakes (the
    old CA's clients are refused, the new CA's accepted), it is not added to it."""
    pki = Pki(tmp_path / "pki")
    new_ca = trustme.CA()
    new_ca_file = str(tmp_path / "new-ca.pem")
    new_ca.cert_pem.write_to_path(new_ca_file)
    bob = Pki._client(tmp_path, "bob", new_ca.issue_cert("bob@example.com", common_name="bob"))
    trust = "listener.name.ssl.ssl.truststore.location"
    with _tls_broker(tmp_path, {"listener.name.ssl.ssl.keystore.location": pki.server_pem,
                                "listener.name.ssl.ssl.client.auth": "required",
                                "listener.name.ssl.ssl.truststore.type": "PEM", trust: pki.ca_file}) as (proc, port):
        assert _client_accepted(port, pki.ca_file, pki.alice)
        assert not _client_accepted(port, pki.ca_file, bob)
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        _set(admin, new_ca_file, key=trust)
        assert _client_accepted(port, pki.ca_file, bob)
        assert not _client_accepted(port, pki.ca_file, pki.alice)
