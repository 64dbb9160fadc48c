"""The Java producer and consumer over TLS (kafka-clients' SSLEngine, TLS 1.3, a PEM truststore)
against a real Kompakt broker's SSL listener (broker/network/tls_transport.py): records of 40 KB,
so the consumer's fetch answers are file ranges encrypted on the TLS worker threads, come back
byte for byte; the Admin (plaintext listener) sees the topic's end offset."""
from __future__ import annotations

import pytest
import trustme

from kompakt.testing.broker import ready_ports

COUNT, SIZE = 120, 40_000


@pytest.fixture
def tls_broker(interop_broker_factory, tmp_path_factory):
    pki = tmp_path_factory.mktemp("java-tls-pki")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(pki / "server.pem"))
    ca.cert_pem.write_to_path(str(pki / "ca.pem"))
    broker = interop_broker_factory({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                                     "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "server.pem")})
    tls = {"bootstrap.servers": f"127.0.0.1:{ready_ports(broker.log_text())['SSL']}", "security.protocol": "SSL",
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem")}
    return broker, tls


def test_java_clients_round_trip_large_records_over_tls(java, tls_broker):
    broker, tls = tls_broker
    shell = java.start("ClientShell", broker.bootstrap)
    try:
        shell.call("createTopics", topics=[{"name": "java-tls", "partitions": 1}])
        records = [{"key": f"k{i}", "value": f"{i:06d}" + chr(ord("a") + i % 26) * SIZE} for i in range(COUNT)]
        shell.call("producer", name="p", props={**tls, "acks": "all", "linger.ms": "20",
                                                "max.request.size": str(4 << 20), "batch.size": str(1 << 20)})
        sent = shell.call("send", name="p", topic="java-tls", records=records, timeout=120)["sent"]
        assert [m["offset"] for m in sent] == list(range(COUNT))
        shell.call("closeProducer", name="p")
        shell.call("consumer", name="c", props={**tls, "max.partition.fetch.bytes": str(8 << 20)})
        shell.call("assign", name="c", partitions=["java-tls-0"])
        got = shell.call("poll", name="c", count=COUNT, timeout=120)["records"]
        shell.call("closeConsumer", name="c")
    finally:
        shell.close()
    assert [(r["offset"], r["key"], r["value"]) for r in got] == [
        (i, r["key"], r["value"]) for i, r in enumerate(records)]
