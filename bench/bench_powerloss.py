"""Power-loss soak: real power cuts under a loaded broker with LazyFS, checking Kafka's promises and
that nothing acknowledged is lost.

    LAZYFS=/path/to/lazyfs/build/lazyfs python bench/bench_powerloss.py [--cuts 100] [--seed 1]
        [--run-s 2.5] [--dir DIR] [--override key=value ...] [--json FILE]

LazyFS (https://github.com/dsrhaslab/lazyfs, a FUSE file system from the crash-consistency research
world) keeps every write in its own page cache until the application syncs it; its FIFO command
`lazyfs::clear-cache` drops everything unsynced, which is what a power cut does to the data (file
names and directories it creates on its backing file system at once: it does not undo unsynced
creates and renames; tests/storage/test_power_cut_steps.py's page-cache model does). Build it
yourself (its README: libfuse3-dev, cmake, g++) and point LAZYFS at the binary; this bench never
builds or fetches it. Needs /dev/fuse (run as root, or with user_allow_other in /etc/fuse.conf).

The load is bench_kill_soak.py's (idempotent acks=all producers on a delete topic with retention and
two compacted topics under an aggressive cleaner, a transactional producer, a consumer group
committing synchronously and rebalancing), with the broker's log dir inside the LazyFS mount. A cut:
after a random 0.3-2x`--run-s` s of load, freeze the broker and its cleaner workers (SIGSTOP),
`lazyfs::clear-cache` (wait for LazyFS's completion FIFO), SIGKILL them; restart on the same dir and
run bench_kill_soak's checks with the load paused (every acknowledged record at its offset, offsets
never reused, log start never back, transactions all-or-nothing for read_committed, committed
offsets never back, no .cleaned/.swap left). Figures: cuts, records acknowledged and checked,
acknowledged records lost, commits gone back, broken promises, failed starts, recovery time per
cut (process start to /ready).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_kill_soak as soak  # noqa: E402  (the load and the checks)

from kompakt.storage.power_cut import descendants  # noqa: E402

LAZYFS_ENV = "LAZYFS"
NO_LAZYFS = f"""bench_powerloss.py needs LazyFS, a FUSE file system that drops unsynced writes on command.
Build it from its public source (https://github.com/dsrhaslab/lazyfs: libs/libpcache/build.sh, then
lazyfs/build.sh; it needs libfuse3-dev, fuse3, cmake and g++) and run
    {LAZYFS_ENV}=/path/to/lazyfs/build/lazyfs python bench/bench_powerloss.py
(as root, or with user_allow_other in /etc/fuse.conf). Nothing of LazyFS is part of Kompakt."""


class LazyFS:
    """One LazyFS mount over a backing dir, its fault FIFO and completion FIFO."""

    def __init__(self, binary: str, base: str, cache: str = "3gb"):
        self.binary, self.base, self.cache = binary, base, cache
        self.root, self.mnt = os.path.join(base, "lazyfs-root"), os.path.join(base, "lazyfs-mnt")
        self.fifo, self.done = os.path.join(base, "faults.fifo"), os.path.join(base, "faults-done.fifo")
        self.config = os.path.join(base, "lazyfs.toml")
        self.proc: subprocess.Popen | None = None

    def mount(self, timeout_s: float = 60) -> None:
        os.makedirs(self.root, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(f'[faults]\nfifo_path="{self.fifo}"\nfifo_path_completed="{self.done}"\n'
                    f'[cache]\napply_eviction=false\n[cache.simple]\ncustom_size="{self.cache}"\nblocks_per_page=1\n'
                    f'[filesystem]\nlog_all_operations=false\nlogfile="{os.path.join(self.base, "lazyfs.log")}"\n')
        self._out = open(os.path.join(self.base, "lazyfs.out"), "ab")
        self.proc = subprocess.Popen([self.binary, self.mnt, "--config-path", self.config, "-o", "allow_other",
                                      "-o", "modules=subdir", "-o", f"subdir={self.root}", "-f"],
                                     stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lazyfs exited with {self.proc.returncode}; see {self.base}/lazyfs.log")
            if self.mounted() and os.path.exists(self.fifo):
                return
            time.sleep(0.1)
        raise RuntimeError(f"lazyfs did not mount {self.mnt} within {timeout_s}s")

    def mounted(self) -> bool:
        with open("/proc/mounts") as f:
            return any(line.split()[1] == self.mnt for line in f)

    def clear_cache(self) -> float:
        """Drop every unsynced write (the power cut); returns how long LazyFS took."""
        t0 = time.monotonic()
        done = os.open(self.done, os.O_RDONLY | os.O_NONBLOCK)   # open the reader first: no lost reply
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)   # ENXIO if LazyFS is gone
            try:
                os.write(fd, b"lazyfs::clear-cache\n")
            finally:
                os.close(fd)
            reply = b""
            while b"finished::clear-cache" not in reply:
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("lazyfs did not confirm clear-cache within 60 s")
                try:
                    chunk = os.read(done, 4096)
                except BlockingIOError:
                    chunk = b""
                if not chunk:
                    time.sleep(0.01)
                reply += chunk
        finally:
            os.close(done)
        return time.monotonic() - t0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def unmount(self) -> None:
        if self.mounted():
            if subprocess.run(["fusermount3", "-u", self.mnt], check=False).returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], check=False)    # a dead LazyFS: detach it
        if self.proc is not None:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remount(self) -> None:
        """After LazyFS itself died: what it had not written to its backing dir is gone (one more
        cut, during the broker's recovery); mount it again over the same backing dir."""
        self.unmount()
        self.mount()


class PowerSoak(soak.Soak):
    """bench_kill_soak's soak with the log dir on LazyFS and power cuts instead of kills."""

    def __init__(self, base: str, fs: LazyFS, overrides: dict[str, str], **kw):
        super().__init__(base, chosen_share=0.0, **kw)
        self.fs = fs
        self.broker = soak.SoakBroker(base, overrides)
        self.broker.log_dir = os.path.join(fs.mnt, "data")
        self.broker.config["log.dirs"] = self.broker.log_dir
        self.failed_starts = 0
        self.lazyfs_crashes = 0

    def cut(self) -> float:
        """Freeze the broker and its workers, drop LazyFS's unsynced data, kill them."""
        pid = self.broker.proc.pid
        frozen = [pid, *descendants(pid)]
        for p in frozen:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        took = self.fs.clear_cache()
        for p in reversed(frozen):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.broker.proc.wait()
        return took

    def cycle(self, n: int, crash_at=None) -> dict:
        self.cycle_lag = 0.0
        self.resume()
        end = time.monotonic() + self.rng.uniform(0.3, self.run_s * 2)
        while time.monotonic() < end:
            self._watch_lag()
            time.sleep(0.1)
        clear_s = self.cut()
        self.pause_quietly()
        killed_at = time.time()
        checkpoint = soak.cleaner_checkpoint(self.broker.log_dir)
        recovery = self.start_after_cut(n)
        result = self.check(killed_at, checkpoint)
        result.update(cycle=n, kill="power cut", recovery_s=round(recovery, 3), clear_cache_s=round(clear_s, 3),
                      loop_stall_s=round(self.cycle_lag, 3), armed_start_s=None)
        self.cycles.append(result)
        print(f"cut {n:3d} recovery {recovery:5.2f}s acked {result['acked']:7d} checked {result['checked']:7d} "
              f"lost {result['lost']} violations {len(result['violations'])}", file=self.out, flush=True)
        for v in result["violations"][:10]:
            print(f"    VIOLATION {v}", file=self.out, flush=True)
        return result

    def start_after_cut(self, n: int) -> float:
        """Restart on the cut's files. LazyFS itself sometimes dies under the recovery's load (its
        own bug: "Resource deadlock avoided"); that is one more cut, during recovery: remount and
        start again. A start that fails with LazyFS alive is a failed start (ends the run)."""
        for _ in range(3):
            try:
                return self.broker.start()
            except RuntimeError as exc:
                self.broker.kill()
                if self.fs.alive:
                    self.failed_starts += 1
                    print(f"cut {n:3d}: FAILED START: {exc}", file=self.out, flush=True)
                    raise
                self.lazyfs_crashes += 1
                print(f"cut {n:3d}: LazyFS died during the broker's recovery; remounted (a second cut)",
                      file=self.out, flush=True)
                self.fs.remount()
        raise RuntimeError("LazyFS died three times in a row")

    def summary(self) -> dict:
        out = super().summary()
        rec = [c["recovery_s"] for c in self.cycles]
        out.pop("chosen_kills", None)
        out.pop("chosen_reached", None)
        out["cuts"] = out.pop("cycles")
        out["failed_starts"] = self.failed_starts
        out["lazyfs_crashes_during_recovery"] = self.lazyfs_crashes
        out["commits_gone_back"] = sum(1 for c in self.cycles for v in c["violations"] if "committed offset" in v)
        if rec:
            out["recovery_s_p95"] = round(sorted(rec)[max(0, int(len(rec) * 0.95) - 1)], 3)
            out["recovery_s_mean"] = round(statistics.mean(rec), 3)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuts", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-s", type=float, default=2.5, help="mean seconds of load before a cut")
    ap.add_argument("--dir", help="work dir (default: a temp dir, removed afterwards); must be a local path")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config for the run (e.g. log.flush.interval.messages=1)")
    ap.add_argument("--json", help="write the summary and per-cut figures here")
    ap.add_argument("--lazyfs-cache", default="3gb",
                    help="LazyFS's cache (it holds every unsynced page, preallocated indexes included: "
                         "53 logs take 1 GiB; LazyFS fails its file system when the cache is full)")
    args = ap.parse_args()
    binary = os.environ.get(LAZYFS_ENV)
    if not binary or not os.access(binary, os.X_OK):
        print(NO_LAZYFS, file=sys.stderr)
        sys.exit(2)
    overrides = dict(kv.split("=", 1) for kv in args.override)
    base = args.dir or tempfile.mkdtemp(prefix="kompakt-powerloss-")
    os.makedirs(base, exist_ok=True)
    fs = LazyFS(binary, base, args.lazyfs_cache)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    run = None
    fs.mount()
    try:
        run = PowerSoak(base, fs, overrides, seed=args.seed, run_s=args.run_s)
        try:
            run.setup()
            for n in range(1, args.cuts + 1):
                run.cycle(n)
        except RuntimeError:
            pass                  # a failed start ends the run; it is counted in the summary
        finally:
            run.close()
    finally:
        fs.unmount()
    summary = run.summary() if run else {}
    summary.update(wall_s=round(time.monotonic() - t0, 1), overrides=overrides)
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary | {"per_cut": run.cycles if run else []}, f, indent=1)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(1 if summary.get("lost") or summary.get("violations") or summary.get("failed_starts") else 0)


if __name__ == "__main__":
    main()
