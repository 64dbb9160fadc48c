"""Every client we support produces and consumes over SSL, SASL_PLAINTEXT + PLAIN, SASL_SSL +
SCRAM-SHA-512 and mutual TLS, against one broker with a listener per protocol (security_support).

The SCRAM user is created through AlterUserScramCredentials on the PLAINTEXT listener (the
credential the clients then log in with only exists as the broker's stored keys). kcat's
librdkafka 2.0.2 exercises SaslHandshake v0 in the advertised range and its doubled-nonce SCRAM
bug; kafkajs runs its four round trips in one node process.
"""
from __future__ import annotations

import pytest

from compat_support import KCAT, NODE, NPM
from security_support import (roundtrip_aiokafka, roundtrip_confluent, roundtrip_kafka_python,
                              roundtrip_kafkajs_many, roundtrip_kcat, security_broker, unique, values)

WAYS = ("ssl", "sasl_plain", "sasl_ssl_scram", "mtls")


@pytest.fixture(scope="module")
def sec(tmp_path_factory):
    with security_broker(tmp_path_factory.mktemp("security-clients")) as (proc, _pki, _ports, eps):
        yield proc, eps


@pytest.mark.parametrize("client", ["confluent", "kafka_python", "aiokafka", "kcat"])
def test_client_round_trips_over_every_protocol(sec, client):
    if client == "kcat" and KCAT is None:
        pytest.skip("kcat not installed")
    proc, eps = sec
    roundtrip = {"confluent": roundtrip_confluent, "kafka_python": roundtrip_kafka_python,
                 "aiokafka": roundtrip_aiokafka, "kcat": roundtrip_kcat}[client]
    for way in WAYS:
        topic = unique(f"{client}-{way}")
        assert roundtrip(eps[way], topic) == values(5), (client, way)


@pytest.mark.skipif(NODE is None or NPM is None, reason="node/npm not installed")
def test_kafkajs_round_trips_over_every_protocol(sec):
    proc, eps = sec
    jobs = [(eps[way], unique(f"kafkajs-{way}")) for way in WAYS]
    assert roundtrip_kafkajs_many(jobs) == [values(5)] * len(WAYS)
