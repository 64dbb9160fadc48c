"""Helpers of the security tests: certificates made with trustme, a broker with one listener per
security protocol, and a produce+consume round trip per real client over any of them.

`Pki(dir)` writes PEM files: a CA, the broker's certificate (127.0.0.1/localhost), a client
certificate for CN=alice (mutual TLS), an expired client certificate, and a client certificate
of a CA nobody trusts. `Endpoint` is what a client needs to reach one listener (bootstrap,
security protocol, CA file, client cert/key, SASL mechanism/user/password); `client_conf(client,
ep)` turns it into that client's settings.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from compat_support import JS_DIR, KCAT, NODE, ensure_node_modules

TIMEOUT_S = 30.0
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-pw" user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw" '
              'user_carol="carol-pw" user_dave="dave-pw";')


class Pki:
    def __init__(self, directory: Path):
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.ca_file = str(d / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_pem = str(d / "server.pem")           # key + chain in one file (ssl.keystore.location)
        server.private_key_and_cert_chain_pem.write_to_path(self.server_pem)
        self.server_chain = b"".join(b.bytes() for b in server.cert_chain_pems).decode()
        self.server_key = server.private_key_pem.bytes().decode()
        self.alice = self._client(d, "alice", self.ca.issue_cert("alice@example.com", common_name="alice",
                                                                 organization_name="Acme"))
        now = datetime.datetime.now(datetime.timezone.utc)
        self.expired = self._client(d, "expired", self.ca.issue_cert(
            "old@example.com", common_name="old", not_before=now - datetime.timedelta(days=30),
            not_after=now - datetime.timedelta(days=1)))
        self.stranger = self._client(d, "stranger", trustme.CA().issue_cert("eve@example.com", common_name="eve"))

    @staticmethod
    def _client(d: Path, name: str, cert) -> tuple[str, str]:
        crt, key = str(d / f"{name}.crt"), str(d / f"{name}.key")
        cert.cert_chain_pems[0].write_to_path(crt)
        cert.private_key_pem.write_to_path(key)
        return crt, key


@dataclass
class Endpoint:
    bootstrap: str
    protocol: str = "PLAINTEXT"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")


SECURED_LISTENERS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL", "MTLS")


def listener_config(pki: Pki, base: dict | None = None) -> dict[str, str]:
    """Broker keys for listeners PLAINTEXT (the harness's, first), SSL, SASL_PLAINTEXT (PLAIN),
    SASL_SSL (SCRAM and PLAIN) and MTLS (SSL, client certificates required), each on a port of
    its own that the broker picks (port 0; BrokerProcess.ports says which)."""
    cfg = dict(base or {})
    cfg.update(mtls_config(pki))
    cfg.update({
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in ("PLAINTEXT",) + SECURED_LISTENERS),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,MTLS:SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "50",
        "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "1",
        "offsets.topic.num.partitions": "1",
    })
    return cfg


def mtls_config(pki: Pki) -> dict[str, str]:
    """The broker's TLS keys and an `MTLS` listener requiring client certificates, whose
    lower-case CN (a rule) or whole subject (DEFAULT) is the principal."""
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.server_pem,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": pki.ca_file,
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/L,DEFAULT",
    }


def endpoints(pki: Pki, ports: dict[str, int]) -> dict[str, Endpoint]:
    """The four ways in the issue asks every client to use."""
    return {
        "ssl": Endpoint(f"127.0.0.1:{ports['SSL']}", "SSL", ca=pki.ca_file),
        "sasl_plain": Endpoint(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "SASL_PLAINTEXT", mechanism="PLAIN",
                               username="alice", password="alice-pw"),
        "sasl_ssl_scram": Endpoint(f"127.0.0.1:{ports['SASL_SSL']}", "SASL_SSL", ca=pki.ca_file,
                                   mechanism="SCRAM-SHA-512", username="scrammy", password="scram-pw"),
        "mtls": Endpoint(f"127.0.0.1:{ports['MTLS']}", "SSL", ca=pki.ca_file, cert=pki.alice[0], key=pki.alice[1]),
    }


@contextlib.contextmanager
def security_broker(base: Path, extra: dict | None = None):
    """A broker with the five listeners of `listener_config` and the SCRAM user `scrammy`
    (context manager for module fixtures): yields (BrokerProcess, Pki, ports, endpoints)."""
    from broker_process import BrokerProcess
    pki = Pki(base / "pki")
    proc = BrokerProcess(base / "broker", {**listener_config(pki), **(extra or {})})
    proc.start()
    ports = {name: proc.ports[name] for name in SECURED_LISTENERS}
    try:
        add_scram_user(proc.bootstrap, "scrammy", "scram-pw")
        yield proc, pki, ports, endpoints(pki, ports)
    finally:
        try:
            proc.stop()
        except RuntimeError:
            proc.kill()


def add_scram_user(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                   iterations: int = 4096) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    mech = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else ScramMechanism.SCRAM_SHA_256
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mech, iterations), password.encode())])
    for f in futures.values():
        f.result(TIMEOUT_S)


# -- client settings ---------------------------------------------------------------------------------

def confluent_conf(ep: Endpoint) -> dict:
    conf = {"bootstrap.servers": ep.bootstrap, "security.protocol": ep.protocol}
    if ep.ca:
        conf["ssl.ca.location"] = ep.ca
    if ep.cert:
        conf.update({"ssl.certificate.location": ep.cert, "ssl.key.location": ep.key})
    if ep.sasl:
        conf.update({"sasl.mechanism": ep.mechanism, "sasl.username": ep.username, "sasl.password": ep.password})
    conf.update(ep.extra)
    return conf


def python_conf(ep: Endpoint, aiokafka: bool = False) -> dict:
    """kafka-python and aiokafka keyword arguments."""
    import ssl
    conf = {"bootstrap_servers": ep.bootstrap, "security_protocol": ep.protocol}
    if ep.tls:
        ctx = ssl.create_default_context(cafile=ep.ca)
        if ep.cert:
            ctx.load_cert_chain(ep.cert, ep.key)
        conf["ssl_context"] = ctx
    if ep.sasl:
        conf.update({"sasl_mechanism": ep.mechanism, "sasl_plain_username": ep.username,
                     "sasl_plain_password": ep.password})
    return conf


def kcat_args(ep: Endpoint) -> list[str]:
    args = ["-b", ep.bootstrap, "-X", f"security.protocol={ep.protocol}"]
    for k, v in confluent_conf(ep).items():
        if k not in ("bootstrap.servers", "security.protocol"):
            args += ["-X", f"{k}={v}"]
    return args


# -- round trips: produce `n` records to a new topic, read them back, return the values ---------------

def values(n: int) -> list[bytes]:
    return [f"v{i}".encode() for i in range(n)]


def roundtrip_confluent(ep: Endpoint, topic: str, n: int = 5) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    p = Producer({**confluent_conf(ep), "message.timeout.ms": int(TIMEOUT_S * 1000)})
    for v in values(n):
        p.produce(topic, v)
    assert p.flush(TIMEOUT_S) == 0
    c = Consumer({**confluent_conf(ep), "group.id": "g-" + topic, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(int(TIMEOUT_S * 2)):
            for m in c.consume(n - len(got), 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) >= n:
                break
    finally:
        c.close()
    return got


def roundtrip_kafka_python(ep: Endpoint, topic: str, n: int = 5) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    p = KafkaProducer(**python_conf(ep), acks="all")
    try:
        for f in [p.send(topic, v) for v in values(n)]:
            f.get(TIMEOUT_S)
    finally:
        p.close()
    c = KafkaConsumer(**python_conf(ep), auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        got = []
        for m in c:
            got.append(m.value)
            if len(got) >= n:
                break
        return got
    finally:
        c.close()


def roundtrip_aiokafka(ep: Endpoint, topic: str, n: int = 5) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run():
        p = AIOKafkaProducer(**python_conf(ep, True), acks="all")
        await p.start()
        try:
            for v in values(n):
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**python_conf(ep, True), auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got = []
            while len(got) < n:
                batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=500), TIMEOUT_S)
                got += [m.value for m in batch.get(tp, [])]
            return got
        finally:
            await c.stop()
    return asyncio.run(asyncio.wait_for(run(), TIMEOUT_S * 2))


def roundtrip_kcat(ep: Endpoint, topic: str, n: int = 5) -> list[bytes]:
    base = [KCAT] + kcat_args(ep)
    data = b"".join(v + b"\n" for v in values(n))
    put = subprocess.run(base + ["-P", "-t", topic, "-p", "0"], input=data, timeout=TIMEOUT_S, capture_output=True)
    assert put.returncode == 0, put.stderr.decode()[-2000:]
    out = subprocess.run(base + ["-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-c", str(n)],
                         timeout=TIMEOUT_S, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return out.stdout.splitlines()


def js_endpoint(ep: Endpoint) -> dict:
    return {"bootstrap": ep.bootstrap, "ca": ep.ca, "cert": ep.cert, "key": ep.key, "tls": ep.tls,
            "mechanism": ep.mechanism.lower() if ep.mechanism else None, "username": ep.username,
            "password": ep.password}


def roundtrip_kafkajs_many(jobs: list[tuple[Endpoint, str]], n: int = 5) -> list[list[bytes]]:
    """One node process runs every (endpoint, topic) round trip (loading kafkajs costs ~1 s)."""
    ensure_node_modules()
    args = {"jobs": [{"endpoint": js_endpoint(ep), "topic": topic, "count": n} for ep, topic in jobs]}
    proc = subprocess.run([NODE, str(JS_DIR / "security_client.js"), json.dumps(args)], capture_output=True,
                          timeout=TIMEOUT_S * 4, cwd=JS_DIR)
    assert proc.returncode == 0, proc.stdout.decode()[-2000:] + proc.stderr.decode()[-2000:]
    return [[v.encode() for v in vs] for vs in json.loads(proc.stdout)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
