"""A real PostgreSQL server for tests: Debian's `postgresql` package, one throw-away cluster.

`PostgresCluster(base_dir).start()` runs initdb and pg_ctl from /usr/lib/postgresql/<newest>/bin:
a cluster with `wal_level=logical` (Debezium's pgoutput decoding needs it), listening on 127.0.0.1
only, on a free port (PostgreSQL must be told its port: if something took it before the server
bound it, the server is started again on another), trust authentication for loopback TCP (a throw-away cluster nobody else can
reach), no Unix socket outside its data dir. `sql(statement)` runs psql and returns its rows
(`psql(statement)` is the command, to run it in the background);
`stop()` is `pg_ctl stop -m fast` and removes the cluster.

PostgreSQL refuses to run as root. Under root (CI runs as root) the server runs as Debian's
`postgres` system user (made by the package) through `runuser`, and the cluster lives in a fresh
directory under the system temp dir owned by that user: pytest's own tmp dirs are 0700 root, which
another user cannot even traverse. As any other user the server runs as that user, in the same kind
of fresh directory. Either way the directory is removed at `stop()`.

Invariants: nothing is downloaded; a missing package fails with a message saying what to install
(scripts/test.sh installs `postgresql`), never a skip.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from kompakt.testing.ports import PortTaken, free_port, retry_if_port_taken, says_port_taken

START_TIMEOUT_S = 60.0


def server_bin_dir() -> Path:
    """/usr/lib/postgresql/<newest major>/bin, where Debian puts initdb, pg_ctl and postgres."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: "
                           "install Debian's `postgresql` package (scripts/test.sh does)")
    return Path(found[-1]).parent


class PostgresCluster:
    """One initdb'd cluster on 127.0.0.1:`port`, superuser `postgres`, database `postgres`."""

    def __init__(self):
        self.bin = server_bin_dir()
        self.port = 0                               # known once started
        self.user = "postgres"
        self.dbname = "postgres"
        self._run_as = None                         # system user owning the server (None: this one)
        if os.geteuid() == 0:
            try:
                self._run_as = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and no `postgres` system user: install Debian's "
                                   "`postgresql` package (it creates the user)") from None
        self.base = Path(tempfile.mkdtemp(prefix="kompakt-pg-"))
        self.data_dir = self.base / "data"
        self.log_file = self.base / "server.log"
        if self._run_as is not None:
            os.chown(self.base, self._run_as.pw_uid, self._run_as.pw_gid)

    def _server_cmd(self, *argv: str) -> list[str]:
        if self._run_as is None:
            return list(argv)
        return ["runuser", "-u", self._run_as.pw_name, "--", *argv]

    def _run(self, *argv: str, timeout: float = START_TIMEOUT_S) -> str:
        done = subprocess.run(self._server_cmd(*argv), capture_output=True, text=True, timeout=timeout,
                              cwd=self.base)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                               f"\n{self.log_text()[-3000:]}")
        return done.stdout

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except (FileNotFoundError, PermissionError):
            return ""

    def start(self) -> "PostgresCluster":
        self._run(str(self.bin / "initdb"), "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-sync")
        retry_if_port_taken(self._start_server, "PostgreSQL")
        return self

    def _start_server(self) -> None:
        self.port = free_port()
        options = " ".join([
            "-c listen_addresses=127.0.0.1", f"-c port={self.port}",
            f"-c unix_socket_directories={self.base}",
            "-c wal_level=logical", "-c max_wal_senders=4", "-c max_replication_slots=4",
            "-c fsync=off", "-c shared_buffers=16MB",
        ])
        logged = len(self.log_text())
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                      "-o", options, "-w", "-t", str(int(START_TIMEOUT_S)), "start")
        except RuntimeError as exc:
            if says_port_taken(self.log_text()[logged:]):     # 'could not bind IPv4 address ...'
                raise PortTaken(f"PostgreSQL could not bind 127.0.0.1:{self.port}: {exc}") from exc
            raise

    def psql(self, statement: str) -> list[str]:
        """The psql command running `statement` over TCP (unaligned, tab-separated, no headers)."""
        return [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                "-d", self.dbname, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", statement]

    def sql(self, statement: str) -> list[list[str]]:
        """Run SQL through psql; rows as lists of text fields (NULL as '')."""
        done = subprocess.run(self.psql(statement), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed ({done.returncode}) on {statement!r}:\n{done.stderr}")
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def stop(self) -> None:
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
