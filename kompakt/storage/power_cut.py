"""Test-only model of the page cache, so a test can cut the power under a real broker process.

Role: a power cut keeps only what was synced. This module records, while the broker runs, what a
cut would leave on disk, and after the process tree is killed rewrites the log dirs to exactly that.
Off unless TEST_KOMPAKT_POWER_JOURNAL=<dir> is set (then `recorder()` returns the recorder the
storage file layer, kompakt/storage/files.py, calls on every sync and namespace change).

The model (POSIX's promises, at their weakest, as LazyFS's "clear cache" applies them):
- a file's durable content is what it held when its last fsync/fdatasync *started* (writes that
  race with the sync count as lost); a file never synced in this run keeps its content from the
  start of the run, or is empty if it was created in this run;
- a directory's durable entries are those it held when its last fsync started: a create, rename or
  unlink inside a directory that was not fsynced since is undone at the cut (a file renamed into
  place comes back under its old name or not at all; an unlinked file comes back); a directory
  never synced in this run keeps its entries from the start of the run (none if created in it).
Not modelled: torn writes inside one page and partial write-back of unsynced data (a real cut may
keep some of it; keeping none is the harsher case for "nothing acknowledged is lost"; the LazyFS
bench, bench/bench_powerloss.py, covers real page-cache behaviour).

Journal layout (<dir>, on the same file system as the roots; every record replaced atomically, so
a kill at any moment leaves the journal as it was before or after one sync):

    roots.json        [{"path": abs path, "ino": n}]   the directories the model restores
    f/<ino>           durable content of file inode <ino> (sparse copy)
    d/<ino>.json      durable entries of directory inode <ino>: {name: [kind "f"|"d", ino, mode]}
    grave/            hard links (and directories moved aside by rmtree) that keep removed inodes
                      allocated, so the file system cannot hand their numbers to new files

Test side: `begin(journal, roots)` before starting the broker (records the current state as
durable), `cut(pid, journal)` SIGKILLs the process tree and applies the journal (or `restore` after
the process died at a crash point, see faults.py: with the journal set a crash point cuts the
power), then the broker restarts on the same dirs and `begin` is implied for the next run.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import threading
import time
import uuid

JOURNAL_ENV = "TEST_KOMPAKT_POWER_JOURNAL"


# -- recording (in the broker and its worker processes) -------------------------------------------
class Recorder:
    """Publishes durable states into the journal; every method is called by the file layer."""

    def __init__(self, journal: str):
        self.journal = os.path.abspath(journal)
        self.dev = os.stat(self.journal).st_dev
        self._lock = threading.Lock()
        self._seq = 0
        self._published: dict[tuple[str, int], int] = {}   # (kind, ino) -> seq of the newest published

    def _next(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _tmp(self) -> str:
        return os.path.join(self.journal, f".tmp-{os.getpid()}-{uuid.uuid4().hex}")

    def _publish(self, key: tuple[str, int], seq: int, tmp: str, final: str) -> None:
        # a snapshot taken before a later one must not overwrite it (two threads syncing one file)
        with self._lock:
            if self._published.get(key, 0) > seq:
                os.unlink(tmp)
                return
            self._published[key] = seq
            os.replace(tmp, final)

    def sync_file(self, fd: int, sync) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != self.dev:
            sync(fd)
            return
        seq, tmp = self._next(), self._tmp()
        copy_content(fd, tmp, st.st_size)          # what the sync is about to make durable
        try:
            sync(fd)
        except BaseException:
            os.unlink(tmp)
            raise
        self._publish(("f", st.st_ino), seq, tmp, os.path.join(self.journal, "f", str(st.st_ino)))

    def sync_dir(self, fd: int, path: str) -> None:
        st = os.fstat(fd)
        if st.st_dev != self.dev:
            os.fsync(fd)
            return
        seq, tmp = self._next(), self._tmp()
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(listing(path), fh)
        try:
            os.fsync(fd)
        except BaseException:
            os.unlink(tmp)
            raise
        self._publish(("d", st.st_ino), seq, tmp, os.path.join(self.journal, "d", f"{st.st_ino}.json"))

    def keep(self, path: str) -> None:
        """Before `path` is unlinked or replaced: hard-link its inode into the grave (files only)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if st.st_dev != self.dev:
            return
        if stat.S_ISREG(st.st_mode):
            try:
                os.link(path, os.path.join(self.journal, "grave", str(st.st_ino)))
            except FileExistsError:
                pass

    def bury(self, path: str) -> None:
        """rmtree's stand-in: move the tree into the grave (one rename, every inode kept)."""
        if os.stat(path).st_dev != self.dev:
            shutil.rmtree(path)
            return
        os.rename(path, os.path.join(self.journal, "grave", f"tree-{uuid.uuid4().hex}"))


def recorder() -> Recorder | None:
    """The recorder when TEST_KOMPAKT_POWER_JOURNAL is set, else None (the production case)."""
    journal = os.environ.get(JOURNAL_ENV)
    return Recorder(journal) if journal else None


def copy_content(src_fd: int, dst: str, size: int) -> None:
    """Copy the first `size` bytes of an open file to a new file `dst`, keeping holes (preallocated
    indexes are sparse), without moving `src_fd`'s file position."""
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    src = os.open(f"/proc/self/fd/{src_fd}", os.O_RDONLY)      # own position for SEEK_DATA
    try:
        pos = 0
        while pos < size:
            try:
                data = os.lseek(src, pos, os.SEEK_DATA)
            except OSError:                                     # ENXIO: only a hole is left
                break
            if data >= size:
                break
            end = min(os.lseek(src, data, os.SEEK_HOLE), size)
            while data < end:
                n = os.copy_file_range(src, out, end - data, data, data)
                if n <= 0:
                    break
                data += n
            pos = end
        os.ftruncate(out, size)
    finally:
        os.close(src)
        os.close(out)


def listing(path: str) -> dict[str, list]:
    """A directory's entries as {name: [kind, ino, mode]} (regular files and directories)."""
    out = {}
    with os.scandir(path) as it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out[e.name] = ["d", st.st_ino, stat.S_IMODE(st.st_mode)]
            elif stat.S_ISREG(st.st_mode):
                out[e.name] = ["f", st.st_ino, stat.S_IMODE(st.st_mode)]
    return out


# -- the test side ---------------------------------------------------------------------------------
def begin(journal: str, roots: list[str]) -> None:
    """Start a run: record everything under `roots` as durable (creating missing roots)."""
    journal = os.path.abspath(journal)
    shutil.rmtree(journal, ignore_errors=True)
    for sub in ("f", "d", "grave"):
        os.makedirs(os.path.join(journal, sub))
    dev = os.stat(journal).st_dev
    entries = []
    for root in roots:
        root = os.path.abspath(root)
        os.makedirs(root, exist_ok=True)
        if os.stat(root).st_dev != dev:
            raise ValueError(f"power-cut journal {journal} must be on the file system of {root}")
        entries.append({"path": root, "ino": os.stat(root).st_ino})
        for dirpath, _dirs, files in os.walk(root):
            with open(os.path.join(journal, "d", f"{os.stat(dirpath).st_ino}.json"), "w", encoding="utf-8") as fh:
                json.dump(listing(dirpath), fh)
            for name in files:
                p = os.path.join(dirpath, name)
                fd = os.open(p, os.O_RDONLY)
                try:
                    st = os.fstat(fd)
                    if stat.S_ISREG(st.st_mode):
                        copy_content(fd, os.path.join(journal, "f", str(st.st_ino)), st.st_size)
                finally:
                    os.close(fd)
    with open(os.path.join(journal, "roots.json.tmp"), "w", encoding="utf-8") as fh:
        json.dump(entries, fh)
    os.replace(os.path.join(journal, "roots.json.tmp"), os.path.join(journal, "roots.json"))


def restore(journal: str) -> dict[str, int]:
    """Rewrite every root to its durable state (call once the process tree is dead), then `begin`
    the next run. Returns counts: files and dirs restored."""
    journal = os.path.abspath(journal)
    with open(os.path.join(journal, "roots.json"), encoding="utf-8") as fh:
        roots = json.load(fh)
    counts = {"files": 0, "dirs": 0}
    for root in roots:
        path = root["path"]
        for name in os.listdir(path):
            p = os.path.join(path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        _materialize(journal, path, root["ino"], counts)
    begin(journal, [r["path"] for r in roots])
    return counts


def _materialize(journal: str, path: str, dir_ino: int, counts: dict) -> None:
    try:
        with open(os.path.join(journal, "d", f"{dir_ino}.json"), encoding="utf-8") as fh:
            entries = json.load(fh)
    except FileNotFoundError:
        entries = {}                 # created in this run and never synced: empty after the cut
    for name, (kind, ino, mode) in sorted(entries.items()):
        p = os.path.join(path, name)
        if kind == "d":
            os.mkdir(p)
            counts["dirs"] += 1
            _materialize(journal, p, ino, counts)
            os.chmod(p, mode)
        else:
            src = os.path.join(journal, "f", str(ino))
            if os.path.exists(src):
                fd = os.open(src, os.O_RDONLY)
                try:
                    copy_content(fd, p, os.fstat(fd).st_size)
                finally:
                    os.close(fd)
            else:
                open(p, "wb").close()  # its name was synced, its data never: empty (ext4's zero-length files)
            os.chmod(p, mode)
            counts["files"] += 1


def descendants(pid: int) -> list[int]:
    """`pid`'s child processes, recursively (from /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", encoding="ascii") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except FileNotFoundError:
                continue
            out += kids
            todo += kids
    return out


def kill_tree(pid: int) -> None:
    """Freeze `pid` and its descendants (no write gets in after the cut), then SIGKILL them all
    (`pid` last; it may be this process: a crash point cutting the power under itself)."""
    stopped = [pid]
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
    for kid in descendants(pid):
        try:
            os.kill(kid, signal.SIGSTOP)
            stopped.append(kid)
        except ProcessLookupError:
            pass
    for p in reversed(stopped):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cut(pid: int, journal: str, *, timeout_s: float = 30.0) -> dict[str, int]:
    """Cut the power under process `pid` now: kill its tree, wait for it, restore the roots."""
    kill_tree(pid)
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    break                 # a zombie: dead, its parent has not reaped it yet
        except FileNotFoundError:
            break
        time.sleep(0.01)
    return restore(journal)
