"""What security costs: produce/fetch over TLS against plaintext on one broker, and SASL set-ups/s.

    python bench/bench_security.py [--quick] [--rounds 5] [--sizes 1024,100] [--no-setups] [--no-write]

One `kompakt serve` with four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT with PLAIN, SASL_SSL with
SCRAM-SHA-512; certificates made by trustme), so every figure is a ratio measured in one run on
one machine (other work on the machine hits both sides alike: each round runs both, the order
alternating, and the figure is the median of the rounds' TLS/plaintext ratios, with their range).
  * produce: confluent-kafka, 1 KiB and 100 B records, acks=1, linger 5 ms, one partition; the
    TLS/plaintext ratio of records/s (goal >= 0.7);
  * fetch: the same records read back from offset 0 over each listener; the ratio;
  * CPU per record of the broker (/proc) and of the client (this process: librdkafka's threads
    and the Python loop), which the machine's load moves much less than the rates; and the load
    average at the start and the end;
  * SASL set-ups per second: new TCP connections doing ApiVersions, SaslHandshake and
    SaslAuthenticate (PLAIN over SASL_PLAINTEXT; SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL,
    the client's PBKDF2 computed once so the server's share is what is measured), 4 client
    threads for a few seconds; and bare TLS handshakes per second for scale.
The broker's CPU seconds per phase are reported too (from /proc). Results go to stdout and,
unless --no-write, a dated section appended to bench/RESULTS.md.

`--request-path` instead times the broker's own request path in-process (Dispatcher.prepare +
run of a Produce of one 10-record batch, no sockets, no client): the PLAINTEXT path with no
authorizer, and with an authorizer checking an ALLOW ACL. Run it with PYTHONPATH at an older
checkout to compare before/after (it uses only what every version has).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import shutil
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_produce_fetch import Broker, cpu_s, create_topic, fetch, free_port, produce  # noqa: E402

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-pw";'


def pki(directory: str) -> tuple[str, str]:
    import trustme
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(f"{directory}/server.pem")
    ca.cert_pem.write_to_path(f"{directory}/ca.pem")
    return f"{directory}/server.pem", f"{directory}/ca.pem"


def start(quick: bool):
    d = tempfile.mkdtemp(prefix="kompakt-bench-sec-")
    server_pem, ca = pki(d)
    ports = {n: free_port() for n in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    broker = Broker(None, (
        "listeners=PLAINTEXT://127.0.0.1:{port}," + ",".join(f"{n}://127.0.0.1:{port}" for n, port in ports.items()),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512", f"sasl.jaas.config={JAAS}",
    ))
    return broker, ports, ca


def scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-pw")]).values():
        f.result(30)


# -- SASL set-ups: a raw client (the figure is the broker's cost, not a client library's) -------------

def _frame(key, version, cid, body: bytes) -> bytes:
    payload = struct.pack(">hhih", key, version, cid, 5) + b"bench" + body
    return struct.pack(">i", len(payload)) + payload


def _recv(sock) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    n = struct.unpack(">i", head)[0]
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _auth(sock, cid, token: bytes) -> bytes:
    sock.sendall(_frame(36, 1, cid, _bytes(token)))
    resp = _recv(sock)
    code = struct.unpack(">h", resp[4:6])[0]
    if code:
        raise RuntimeError(f"SaslAuthenticate failed with {code}")
    msg_len = struct.unpack(">h", resp[6:8])[0]
    pos = 8 + max(msg_len, 0)
    n = struct.unpack(">i", resp[pos:pos + 4])[0]
    return resp[pos + 4:pos + 4 + n]


class ScramClient:
    """Client side of SCRAM-SHA-512 with the salted password cached per salt (RFC 5802)."""
    _salted: dict = {}

    def run(self, sock, user, password):
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={user},r={nonce}"
        server_first = _auth(sock, 3, ("n,," + first_bare).encode()).decode()
        attrs = dict(x.split("=", 1) for x in server_first.split(","))
        key = (attrs["s"], attrs["i"])
        if key not in self._salted:
            self._salted[key] = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]),
                                                    int(attrs["i"]))
        salted = self._salted[key]
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        sig = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
        _auth(sock, 4, f"{without_proof},p={proof}".encode())


def setup_once(port: int, mechanism: str | None, tls: ssl.SSLContext | None) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(_frame(18, 0, 1, b""))
        _recv(sock)
        if mechanism is None:
            return
        sock.sendall(_frame(17, 1, 2, struct.pack(">h", len(mechanism)) + mechanism.encode()))
        _recv(sock)
        if mechanism == "PLAIN":
            _auth(sock, 3, b"\0bench\0bench-pw")
        else:
            ScramClient().run(sock, "bench", "bench-pw")
    finally:
        sock.close()


def setups_per_s(port, mechanism, tls, seconds, threads=4) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def worker(i):
        while time.monotonic() < stop:
            setup_once(port, mechanism, tls)
            counts[i] += 1
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def request_path(n: int) -> None:
    import asyncio
    from kompakt.broker.server import Broker
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.protocol.records import build_batch
    from kafka.protocol.producer.produce import ProduceRequest

    def frame(topic):
        td, pd = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[td(
            name=topic, partition_data=[pd(index=0, records=build_batch([(None, b"x" * 100)] * 10))])])
        req.with_header(correlation_id=1, client_id="bench")
        return bytes(req.encode(version=9, header=True))

    async def timed(broker, data, label):
        d = broker.dispatcher
        runs = []
        for _ in range(5):
            t0 = time.process_time()          # CPU time: other processes' load matters less than wall time
            for _ in range(n):
                ctx, module, request = d.prepare(bytearray(data))
                await d.run(ctx, module, request)
            runs.append((time.process_time() - t0) / n * 1e6)
        print(f"| {label} | {min(runs):.1f} µs | {statistics.median(runs):.1f} µs |", flush=True)

    async def main_async():
        for label, props in (("PLAINTEXT, no authorizer", {}),
                             ("authorizer on, principal allowed by an ACL", {
                                 "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                 "allow.everyone.if.no.acl.found": "true"})):
            from kompakt.config.broker_config import BROKER_KEYS
            if props and "authorizer.class.name" not in BROKER_KEYS:
                continue                      # an older checkout, without the authorizer
            d = tempfile.mkdtemp(prefix="kompakt-bench-path-")
            broker = Broker(BrokerConfig({"log.dirs": d, "log.cleaner.enable": "false", "metrics.port": "0",
                                          "listeners": "PLAINTEXT://127.0.0.1:0", **props}))
            broker.log_manager.startup()
            broker.log_manager.create_topic("path", 1, {})
            if props:
                from kompakt.broker.security.setup import build_authorizer
                broker.authorizer = build_authorizer(broker.config)
            await timed(broker, frame("path"), label)
            broker.log_manager.shutdown()
            shutil.rmtree(d, ignore_errors=True)
    asyncio.run(main_async())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer records and shorter set-up runs")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of plaintext and TLS, order alternating")
    ap.add_argument("--sizes", default="1024,100", help="record sizes to measure (bytes, comma separated)")
    ap.add_argument("--no-setups", action="store_true", help="skip the connection set-up rates")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--request-path", action="store_true", help="in-process Produce request path only")
    args = ap.parse_args()
    if args.request_path:
        request_path(2000 if args.quick else 20000)
        return
    broker, ports, ca = start(args.quick)
    try:
        scram_user(broker.bootstrap)
        tls_conf = {"security.protocol": "SSL", "ssl.ca.location": ca}
        sides = {"plaintext": (broker.bootstrap, {}), "tls": (f"127.0.0.1:{ports['SSL']}", tls_conf)}
        loads = [os.getloadavg()[0]]
        lines = throughput(broker, sides, [int(x) for x in args.sizes.split(",")], args)
        loads.append(os.getloadavg()[0])
        setup_lines = [] if args.no_setups else setups(broker, ports, ca, args)
    finally:
        broker.stop()
        shutil.rmtree(broker.dir, ignore_errors=True)          # GBs of records after a 9-round run
        shutil.rmtree(os.path.dirname(ca), ignore_errors=True)
    if not args.no_write:
        write(lines, setup_lines, loads, args)


RECORDS = {1024: 150_000, 100: 300_000}      # per round and side (--quick: a fifth)


def throughput(broker, sides, sizes, args) -> list[str]:
    """Produce then fetch over each side, `args.rounds` rounds, order alternating: table rows."""
    pid = broker.proc.pid
    lines = []
    for size in sizes:
        n = RECORDS.get(size, 150_000) // (5 if args.quick else 1)
        got = {side: {k: [] for k in ("produce", "fetch", "broker_produce", "broker_fetch", "client_produce",
                                      "client_fetch")} for side in sides}
        for r in range(args.rounds):
            for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                bootstrap, conf = sides[side]
                topic = f"bench-{side}-{size}-{r}"
                create_topic(broker.bootstrap, topic, 1)
                for what in ("produce", "fetch"):
                    c0, u0 = cpu_s(pid), client_cpu_s()
                    if what == "produce":
                        secs = produce(bootstrap, topic, n, size, "1", conf=conf)
                    else:
                        secs = fetch(bootstrap, topic, 1, n, conf=conf)
                    got[side][what].append(n / secs)
                    got[side]["broker_" + what].append((cpu_s(pid) - c0) / n * 1e6)
                    got[side]["client_" + what].append((client_cpu_s() - u0) / n * 1e6)
        med = {side: {k: statistics.median(v) for k, v in d.items()} for side, d in got.items()}
        for what in ("produce", "fetch"):
            p, t = med["plaintext"][what], med["tls"][what]
            ratios = sorted(a / b for a, b in zip(got["tls"][what], got["plaintext"][what]))
            lines.append(f"| {what} {size} B | {p:,.0f} rec/s ({p * size / 1e6:.1f} MB/s) | "
                         f"{t:,.0f} rec/s ({t * size / 1e6:.1f} MB/s) | **{statistics.median(ratios):.2f}x** "
                         f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | "
                         f"{med['plaintext']['broker_' + what]:.2f} / {med['tls']['broker_' + what]:.2f} | "
                         f"{med['plaintext']['client_' + what]:.2f} / {med['tls']['client_' + what]:.2f} |")
            print(lines[-1], flush=True)
    return lines


def client_cpu_s() -> float:
    """CPU seconds of this process (the client: librdkafka's threads and the Python loop)."""
    t = os.times()
    return t.user + t.system


def setups(broker, ports, ca, args) -> list[str]:
    """Connection set-ups per second and the broker's CPU per set-up: table rows."""
    pid = broker.proc.pid
    client_tls = ssl.create_default_context(cafile=ca)
    seconds = 2.0 if args.quick else 5.0
    kinds = [
        ("TCP + ApiVersions (PLAINTEXT), for scale", broker.port, None, None),
        ("TLS handshake + ApiVersions (SSL)", ports["SSL"], None, client_tls),
        ("SASL/PLAIN (SASL_PLAINTEXT)", ports["SASL_PLAINTEXT"], "PLAIN", None),
        ("SASL/SCRAM-SHA-512, 4096 iterations (SASL_PLAINTEXT)", ports["SASL_PLAINTEXT"], "SCRAM-SHA-512", None),
        ("SASL/SCRAM-SHA-512 over TLS (SASL_SSL)", ports["SASL_SSL"], "SCRAM-SHA-512", client_tls),
    ]
    setup_lines = []
    for label, port, mech, tls in kinds:
        c0 = cpu_s(pid)
        t0 = time.monotonic()
        rate = setups_per_s(port, mech, tls, seconds)
        broker_cpu_ms = (cpu_s(pid) - c0) / (rate * (time.monotonic() - t0)) * 1000
        setup_lines.append(f"| {label} | {rate:,.0f} /s | {broker_cpu_ms:.2f} ms |")
        print(setup_lines[-1], flush=True)
    return setup_lines


def write(lines, setup_lines, loads, args) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = (f"python bench/bench_security.py{' --quick' if args.quick else ''} --rounds {args.rounds} "
               f"--sizes {args.sizes}{' --no-setups' if args.no_setups else ''}")
    text = [f"\n## Security: TLS vs plaintext, SASL set-ups ({stamp})\n",
            f"`{command}` on {os.cpu_count()} vCPU ({platform_cpu()}); one broker, four listeners; "
            f"{args.rounds} rounds, order alternating; rates are medians, the ratio is the median of the "
            f"rounds' ratios (range in brackets); load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the "
            f"end (other agents' work was running on the machine).\n",
            "| confluent-kafka, acks=1, 1 partition | plaintext | TLS (SSL listener) | TLS / plaintext | "
            "broker CPU µs/record plain / TLS | client CPU µs/record plain / TLS |", "|---|---|---|---|---|---|",
            *lines, ""]
    if setup_lines:
        text += ["| connection set-up (4 client threads) | set-ups | broker CPU per set-up |", "|---|---|---|",
                 *setup_lines, ""]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(text) + "\n")


def platform_cpu() -> str:
    from bench_produce_fetch import _cpu
    return _cpu()


if __name__ == "__main__":
    main()
