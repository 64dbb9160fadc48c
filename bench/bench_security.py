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
    and the Python loop), which the machine's load moves much less than the rates; the broker's
    CPU seconds per GB of values on its event-loop thread (the main thread) and on its TLS worker
    threads (OS name kompakt-tls: large answers encrypted, large requests decrypted there); and
    the load average at the start and the end;
  * SASL set-ups per second: new TCP connections doing ApiVersions, SaslHandshake and
    SaslAuthenticate (PLAIN over SASL_PLAINTEXT; SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL,
    the client's PBKDF2 computed once so the server's share is what is measured), 4 client
    threads for a few seconds; and bare TLS handshakes per second for scale.
The broker's CPU seconds per phase are reported too (from /proc). Results go to stdout and,
unless --no-write, a dated section appended to bench/RESULTS.md.

`--tls-fetch` measures where a TLS fetch's CPU goes (issue 25: TLS encryption off the event loop):
a broker with a PLAINTEXT and an SSL listener, under `taskset` on one CPU (the client on the
other) and on both (the client too); 1 KiB records produced over plaintext, then read back over
TLS by confluent-kafka (fetch.queue.backoff.ms=10): the fetch rate, and the broker's CPU seconds
per GB fetched on its event-loop thread (the main thread, /proc/<pid>/task/<pid>/schedstat) and
on its other threads (the TLS encryption workers among them). A third case runs the raw client
while another process keeps the event loop busy (two connections pipelining small plaintext
Produce requests, 16 in flight each): the TLS rate and the producers' requests/s, the share one
gets when the other wants the loop too. `--before DIR` runs the broker of
another checkout too (DIR on PYTHONPATH, e.g. `git archive <commit> | tar -x -C DIR`), each round
alternating the order of checkouts and layouts, so "before" and "after" share the machine's
moods.

`--tls-produce` measures where a TLS producer's CPU goes (issue 25: TLS decryption off the event
loop): a broker with a PLAINTEXT and an SSL listener on both CPUs; confluent-kafka produces 1 KiB
records over TLS (acks=1, linger 5 ms: ~1 MB requests), alone and while another process keeps the
event loop busy (BusyLoad, as for --tls-fetch): the TLS rate, the broker's CPU seconds per GB on its
event-loop thread, its kompakt-tls threads and its other threads, and the busy producers'
requests/s. `--before DIR` runs another checkout's broker too, the order alternating each round.

`--request-path` instead times the broker's own request path in-process (Dispatcher.prepare +
run of a Produce of one 10-record batch, no sockets, no client): the PLAINTEXT path with no
authorizer, and with an authorizer checking an ALLOW ACL. Run it with PYTHONPATH at an older
checkout to compare before/after (it uses only what every version has).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
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

from bench_produce_fetch import (SHORT_QUEUE_BACKOFF, Broker, _cpu, _results_section, _table,  # noqa: E402
                                 _write_results, client_cpu_s, cpu_s, create_topic, drop_topic, fetch, free_port,
                                 loop_thread_cpu_s, produce, tree_cpu_s)

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


CLIENTS = ("confluent-kafka", "raw", "raw, busy loop")   # --tls-fetch's cases (see the module docstring)


@contextlib.contextmanager
def _checkouts(args, prefix: str):
    """--tls-fetch, --tls-produce: (the checkouts to run by name: "after" is PYTHONPATH's, and with
    --before DIR "before" is DIR; the broker's PEM; the CA) in a temporary directory made with
    `prefix`, the working directory while it lasts (`python -m kompakt` puts the cwd first on
    sys.path: PYTHONPATH must decide which checkout runs); PYTHONPATH, the cwd and the directory
    are put back and removed after."""
    codes = {"after": os.environ.get("PYTHONPATH", "")}
    if args.before:
        codes = {"before": os.path.abspath(args.before), **codes}
    d = tempfile.mkdtemp(prefix=prefix)
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    try:
        server_pem, ca = pki(d)
        os.chdir(d)
        yield codes, server_pem, ca
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        shutil.rmtree(d, ignore_errors=True)


def _tls_broker(checkout: str, server_pem: str, prefix: tuple[str, ...] = ()):
    """A broker of `checkout` (PYTHONPATH) with a PLAINTEXT and an SSL listener: (broker, SSL port)."""
    os.environ["PYTHONPATH"] = checkout
    port = free_port()
    return Broker(None, (f"listeners=PLAINTEXT://127.0.0.1:{{port}},SSL://127.0.0.1:{port}",
                         "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}"), prefix), port


def tls_fetch(args) -> None:
    """--tls-fetch: see the module docstring."""
    n, size = (60_000 if args.quick else 200_000), 1024
    raw_answers = 40 if args.quick else 120     # 8 MB each
    everything = sorted(os.sched_getaffinity(0))
    if len(everything) < 2:
        raise SystemExit("--tls-fetch needs a machine with two CPUs")
    layouts = {"1": (everything[:1], everything[1:2]), "2": (everything[:2], everything[:2])}
    res: dict = {}                 # (client, code, layout) -> [(MB/s, loop, workers, other CPU-s/GB, cores busy)]
    with _checkouts(args, "kompakt-bench-tls-") as (codes, server_pem, ca):
        runs = [(code, layout) for code in codes for layout in layouts]
        tls_conf = {"security.protocol": "SSL", "ssl.ca.location": ca, **SHORT_QUEUE_BACKOFF}
        load0 = os.getloadavg()[0]
        try:
            for rnd in range(args.rounds):
                for code, layout in (runs if rnd % 2 == 0 else runs[::-1]):
                    broker_cpus, client_cpus = layouts[layout]
                    os.sched_setaffinity(0, client_cpus)     # the client's threads start from here
                    broker, port = _tls_broker(codes[code], server_pem, ("taskset", "-c", ",".join(map(str, broker_cpus))))
                    try:
                        tls = f"127.0.0.1:{port}"
                        create_topic(broker.bootstrap, "warm-up", 1)
                        produce(broker.bootstrap, "warm-up", 20_000, size, "1")
                        fetch(tls, "warm-up", 1, 20_000, tls_conf)
                        topic = f"tls-{rnd}"
                        create_topic(broker.bootstrap, topic, 1)
                        produce(broker.bootstrap, topic, n, size, "1")
                        create_topic(broker.bootstrap, "busy", 4)
                        consumers = {"confluent-kafka": lambda: (fetch(tls, topic, 1, n, tls_conf), n * size),
                                     "raw": lambda: fetch_raw_tls(port, ca, topic, raw_answers),
                                     "raw, busy loop": lambda: fetch_raw_tls(port, ca, topic, raw_answers // 2)}
                        for client in CLIENTS:
                            load = BusyLoad(broker.port, "busy") if "busy" in client else None
                            try:
                                row = _measured(broker.proc.pid, consumers[client], load)
                            finally:
                                if load is not None:
                                    load.stop()
                            res.setdefault((client, code, layout), []).append(row)
                            print(f"round {rnd} {code:6} broker on {layout} CPU(s), {client:15}: TLS fetch {row[0]:7.1f} MB/s, "
                                  f"broker CPU-s/GB loop {row[1]:.2f} + TLS workers {row[2]:.2f} + other threads {row[3]:.2f}, "
                                  f"{row[4]:.2f} cores busy, producers {row[5]:,.0f} req/s (load {os.getloadavg()[0]:.1f})",
                                  flush=True)
                    finally:
                        broker.stop()
        finally:
            os.sched_setaffinity(0, everything)
    load1 = os.getloadavg()[0]
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in res.items()}
    rows = []
    for client in CLIENTS:
        for code, layout in runs:
            r = med[(client, code, layout)]
            gain = f"{r[0] / med[(client, code, '1')][0]:.2f}x" if layout == "2" else ""
            rows.append([client, code, layout, f"{r[0]:.1f}", gain, f"{r[1]:.2f}", f"{r[2]:.2f}", f"{r[3]:.2f}",
                         f"{r[1] + r[2] + r[3]:.2f}", f"{r[4]:.2f}", f"{r[5]:,.0f}" if r[5] else ""])
    table = _table(["consumer", "broker code", "broker CPUs", "TLS fetch MB/s", "2 CPUs / 1", "loop CPU-s/GB",
                    "TLS workers CPU-s/GB", "other threads CPU-s/GB", "broker CPU-s/GB", "broker cores busy",
                    "producers req/s"], "llrrrrrrrrr", rows)
    print("\n".join(table))
    before = f" Before: the broker of {args.before}." if args.before else ""
    _write_results(args, _results_section(
        f"TLS fetch: the event loop's share, one CPU vs two ({_tls_command('--tls-fetch', args)})",
        f"load average {load0:.1f} at the start, {load1:.1f} at the end; shared with other work (other agents' "
        f"builds and tests on the same 2 CPUs).{before} {n:,} records of 1 KiB produced over plaintext, read "
        f"back over TLS (TLS 1.3, AES-256-GCM) by confluent-kafka {ck_version()} (fetch.queue.backoff.ms=10), "
        f"then {raw_answers} Fetch answers of 8 MB (offset 0, from the page cache) read by a raw Python TLS "
        f"client with 2 requests in flight that parses nothing (the broker, not the client, is the bottleneck), "
        f"and half as many again while another process keeps the loop busy with small plaintext Produce "
        f"requests (2 connections, 16 in flight each; its requests/s in the last column; CPU per GB then "
        f"includes the producers' share). "
        f"The broker under `taskset` on CPU {everything[0]} (1, the client on the other CPU) or on both (2, the "
        f"client too). CPU-s/GB: the broker's CPU per GB received by the client, on its event-loop thread, its "
        f"TLS encryption threads (OS name kompakt-tls) and its other threads. Medians of {args.rounds} "
        f"round(s), the order of checkouts and layouts alternating each round.", table))


def _tls_command(mode: str, args) -> str:
    """The command line of a --tls-fetch / --tls-produce run, in backquotes (its section's title)."""
    return (f"`python bench/bench_security.py {mode}{' --quick' if args.quick else ''} --rounds {args.rounds}"
            f"{' --before DIR' if args.before else ''}`")


PRODUCERS = ("alone", "busy loop")   # --tls-produce's cases


def tls_produce(args) -> None:
    """--tls-produce: see the module docstring."""
    n, size = (60_000 if args.quick else 200_000), 1024
    res: dict = {}                 # (case, code) -> [(MB/s, loop, workers, other CPU-s/GB, cores busy, req/s)]
    with _checkouts(args, "kompakt-bench-tlsp-") as (codes, server_pem, ca):
        tls_conf = {"security.protocol": "SSL", "ssl.ca.location": ca}
        load0 = os.getloadavg()[0]
        for rnd in range(args.rounds):
            for code in (list(codes) if rnd % 2 == 0 else list(codes)[::-1]):
                broker, port = _tls_broker(codes[code], server_pem)
                try:
                    tls = f"127.0.0.1:{port}"
                    create_topic(broker.bootstrap, "warm-up", 1)
                    produce(tls, "warm-up", 20_000, size, "1", conf=tls_conf)
                    create_topic(broker.bootstrap, "busy", 4)
                    for case in PRODUCERS:
                        topic = f"tls-{rnd}-{code}-{case.replace(' ', '-')}"
                        create_topic(broker.bootstrap, topic, 1)
                        load = BusyLoad(broker.port, "busy") if case == "busy loop" else None
                        try:
                            row = _measured(broker.proc.pid, lambda: (produce(tls, topic, n, size, "1", conf=tls_conf),
                                                                      n * size), load)
                        finally:
                            if load is not None:
                                load.stop()
                        res.setdefault((case, code), []).append(row)
                        print(f"round {rnd} {code:6} {case:9}: TLS produce {row[0]:7.1f} MB/s, broker CPU-s/GB loop "
                              f"{row[1]:.2f} + TLS workers {row[2]:.2f} + other threads {row[3]:.2f}, producers "
                              f"{row[5]:,.0f} req/s (load {os.getloadavg()[0]:.1f})", flush=True)
                finally:
                    broker.stop()
    load1 = os.getloadavg()[0]
    rows = []
    for case in PRODUCERS:
        for code in codes:
            r = [statistics.median(col) for col in zip(*res[(case, code)])]
            rows.append([case, code, f"{r[0]:.1f}", f"{r[1]:.2f}", f"{r[2]:.2f}", f"{r[3]:.2f}",
                         f"{r[1] + r[2] + r[3]:.2f}", f"{r[5]:,.0f}" if r[5] else ""])
    table = _table(["TLS producer", "broker code", "TLS produce MB/s", "loop CPU-s/GB", "TLS workers CPU-s/GB",
                    "other threads CPU-s/GB", "broker CPU-s/GB", "busy producers req/s"], "llrrrrrr", rows)
    print("\n".join(table))
    before = f" Before: the broker of {args.before}." if args.before else ""
    _write_results(args, _results_section(
        f"TLS produce: the event loop's share ({_tls_command('--tls-produce', args)})",
        f"load average {load0:.1f} at the start, {load1:.1f} at the end; shared with other work (other agents' "
        f"builds and tests on the same 2 CPUs).{before} {n:,} records of 1 KiB produced over TLS (TLS 1.3, "
        f"AES-256-GCM) by confluent-kafka {ck_version()} (acks=1, linger.ms=5: requests of ~1 MB), alone and "
        f"while another process keeps the loop busy with small plaintext Produce requests (2 connections, 16 in "
        f"flight each; its requests/s in the last column; CPU per GB then includes their share). CPU-s/GB: "
        f"the broker's CPU per GB of values produced, on its event-loop thread, its TLS threads (OS name "
        f"kompakt-tls) and its other threads (log writers, group-commit syncs). Medians of {args.rounds} "
        f"round(s), the order of checkouts alternating each round.", table))


def _measured(pid: int, consume, load=None) -> tuple:
    """Run `consume()` -> (seconds, bytes) once the broker is quiet (but for `load`, a BusyLoad):
    (MB/s, CPU-s/GB on the loop thread, on the TLS workers, on other threads, cores busy, the
    load's requests/s or 0)."""
    if load is None:
        quiet(pid)                               # a produce's trailing syncs are not the fetch's
    else:
        load.requests()                          # started and answering
    c0, l0, w0 = tree_cpu_s(pid), loop_thread_cpu_s(pid), named_threads_cpu_s(pid, "kompakt-tls")
    r0, t0 = (load.requests() if load else 0), time.monotonic()
    secs, nbytes = consume()
    r1, t1 = (load.requests() if load else 0), time.monotonic()
    c1, l1, w1 = tree_cpu_s(pid), loop_thread_cpu_s(pid), named_threads_cpu_s(pid, "kompakt-tls")
    gb = nbytes / 1e9
    return (nbytes / secs / 1e6, (l1 - l0) / gb, (w1 - w0) / gb, max(0.0, c1 - c0 - (l1 - l0) - (w1 - w0)) / gb,
            (c1 - c0) / secs, (r1 - r0) / (t1 - t0))


_LOAD = """
import sys, threading
sys.path.insert(0, {bench!r})
from bench_produce_fetch import _pipeline_run, _produce_request
request, done, stop = _produce_request({topic!r}, 4, 1), [0], threading.Event()
def run():
    while not stop.is_set():
        _pipeline_run({port}, request, 100, 16)
        done[0] += 100
for _ in range(2):
    threading.Thread(target=run, daemon=True).start()
for line in sys.stdin:
    if line.strip() == "q":
        stop.set()
        break
    print(done[0], flush=True)
"""


class BusyLoad:
    """Another process keeping the broker's event loop busy: two connections pipelining small
    plaintext Produce requests (10 x 100 B to each of 4 partitions, 16 in flight each).
    `requests()` is how many it has had answered so far."""

    def __init__(self, port: int, topic: str):
        import subprocess
        self.proc = subprocess.Popen([sys.executable, "-c", _LOAD.format(bench=str(HERE), topic=topic, port=port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)

    def requests(self) -> int:
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.stdin.write("q\n")
        self.proc.stdin.flush()
        self.proc.wait(30)


RAW_FETCH_BYTES = 8 << 20          # the raw client's answers: 8 MB of records from offset 0


def _fetch_frame(topic: str, cid: int) -> bytes:
    from kafka.protocol.consumer.fetch import FetchRequest
    FT = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=RAW_FETCH_BYTES, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                           partition=0, fetch_offset=0, partition_max_bytes=RAW_FETCH_BYTES,
                           current_leader_epoch=-1, log_start_offset=-1)])])
    req.with_header(correlation_id=cid, client_id="bench")
    payload = bytes(req.encode(version=11, header=True))
    return struct.pack(">i", len(payload)) + payload


def fetch_raw_tls(port: int, ca: str, topic: str, answers: int, window: int = 2) -> tuple[float, int]:
    """A client that costs little: one TLS connection keeping `window` Fetch requests (the same
    8 MB from offset 0, served from the page cache) in flight, answers read into one buffer and
    not parsed; (seconds, bytes received)."""
    sock = ssl.create_default_context(cafile=ca).wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                                             server_hostname="127.0.0.1")
    request = _fetch_frame(topic, 1)
    buf = memoryview(bytearray(RAW_FETCH_BYTES + (1 << 20)))
    received, sent = 0, 0
    t0 = time.perf_counter()
    try:
        for _ in range(min(window, answers)):
            sock.sendall(request)
            sent += 1
        for _ in range(answers):
            size = struct.unpack(">i", _recv_exactly(sock, buf, 4))[0]
            _recv_exactly(sock, buf, size)
            received += 4 + size
            if sent < answers:
                sock.sendall(request)
                sent += 1
    finally:
        sock.close()
    return time.perf_counter() - t0, received


def _recv_exactly(sock, buf: memoryview, n: int) -> memoryview:
    got = 0
    while got < n:
        k = sock.recv_into(buf[got:n])
        if not k:
            raise ConnectionError("closed")
        got += k
    return buf[:n]


def named_threads_cpu_s(pid: int, name: str) -> float:
    """CPU seconds of the process's threads whose OS name (/proc/<pid>/task/<tid>/comm) is `name`."""
    total = 0
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            if Path(task.path, "comm").read_text().strip() == name:
                total += int(Path(task.path, "schedstat").read_text().split()[0])
        except OSError:
            pass
    return total / 1e9


def quiet(pid: int, timeout_s: float = 20.0) -> None:
    """Wait until the broker uses under 2% of a CPU over 0.25 s (at most `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    before = tree_cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = tree_cpu_s(pid)
        if now - before < 0.005:
            return
        before = now


def ck_version() -> str:
    import confluent_kafka
    return f"{confluent_kafka.version()} / librdkafka {confluent_kafka.libversion()[0]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer records and shorter set-up runs")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of plaintext and TLS, order alternating")
    ap.add_argument("--sizes", default="1024,100", help="record sizes to measure (bytes, comma separated)")
    ap.add_argument("--no-setups", action="store_true", help="skip the connection set-up rates")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--request-path", action="store_true", help="in-process Produce request path only")
    ap.add_argument("--tls-fetch", action="store_true",
                    help="TLS fetch: rate and the broker's CPU on its loop thread vs other threads, 1 CPU vs 2")
    ap.add_argument("--tls-produce", action="store_true",
                    help="TLS produce: rate and the broker's CPU on its loop thread vs other threads, alone and "
                         "beside a busy loop")
    ap.add_argument("--before", metavar="DIR",
                    help="--tls-fetch, --tls-produce: also run the broker of the checkout in DIR")
    args = ap.parse_args()
    if args.tls_fetch:
        if args.rounds == 5 and "--rounds" not in sys.argv:
            args.rounds = 3
        return tls_fetch(args)
    if args.tls_produce:
        if args.rounds == 5 and "--rounds" not in sys.argv:
            args.rounds = 3
        return tls_produce(args)
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
                                      "client_fetch", "loop_produce", "loop_fetch", "workers_produce",
                                      "workers_fetch")} for side in sides}
        for r in range(args.rounds):
            for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                bootstrap, conf = sides[side]
                topic = f"bench-{side}-{size}-{r}"
                create_topic(broker.bootstrap, topic, 1)
                for what in ("produce", "fetch"):
                    c0, u0 = cpu_s(pid), client_cpu_s()
                    l0, w0 = loop_thread_cpu_s(pid), named_threads_cpu_s(pid, "kompakt-tls")
                    if what == "produce":
                        secs = produce(bootstrap, topic, n, size, "1", conf=conf)
                    else:
                        secs = fetch(bootstrap, topic, 1, n, conf=conf)
                    gb = n * size / 1e9
                    got[side][what].append(n / secs)
                    got[side]["broker_" + what].append((cpu_s(pid) - c0) / n * 1e6)
                    got[side]["client_" + what].append((client_cpu_s() - u0) / n * 1e6)
                    got[side]["loop_" + what].append((loop_thread_cpu_s(pid) - l0) / gb)
                    got[side]["workers_" + what].append((named_threads_cpu_s(pid, "kompakt-tls") - w0) / gb)
                drop_topic(broker, topic)       # no later round writes into fresh memory (drop_topic)
        med = {side: {k: statistics.median(v) for k, v in d.items()} for side, d in got.items()}
        for what in ("produce", "fetch"):
            p, t = med["plaintext"][what], med["tls"][what]
            ratios = sorted(a / b for a, b in zip(got["tls"][what], got["plaintext"][what]))
            lines.append(f"| {what} {size} B | {p:,.0f} rec/s ({p * size / 1e6:.1f} MB/s) | "
                         f"{t:,.0f} rec/s ({t * size / 1e6:.1f} MB/s) | **{statistics.median(ratios):.2f}x** "
                         f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | "
                         f"{med['plaintext']['broker_' + what]:.2f} / {med['tls']['broker_' + what]:.2f} | "
                         f"{med['plaintext']['client_' + what]:.2f} / {med['tls']['client_' + what]:.2f} | "
                         f"{med['plaintext']['loop_' + what]:.2f} / {med['tls']['loop_' + what]:.2f} | "
                         f"{med['tls']['workers_' + what]:.2f} |")
            print(lines[-1], flush=True)
    return lines


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
            "broker CPU µs/record plain / TLS | client CPU µs/record plain / TLS | broker event-loop CPU-s/GB "
            "plain / TLS | kompakt-tls threads CPU-s/GB (TLS) |", "|---|---|---|---|---|---|---|---|",
            *lines, ""]
    if setup_lines:
        text += ["| connection set-up (4 client threads) | set-ups | broker CPU per set-up |", "|---|---|---|",
                 *setup_lines, ""]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(text) + "\n")


def platform_cpu() -> str:
    return _cpu()


if __name__ == "__main__":
    main()
