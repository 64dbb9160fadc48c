"""Test-only fault seams: named crash points, injected I/O errors and a deliberately broken clean.
Off unless an env var is set.

Role: the one place where tests make the broker fail on purpose, so fault tests never patch
callers. Every variable is read once, at import; with none set every hook is a global lookup
and a `None` test.

    TEST_KOMPAKT_CRASH_AT=<point>[:<n>]
        SIGKILL this process at the n-th hit (default the first) of crash point <point>. Only the
        broker process arms it (cleaner worker processes inherit the variable and ignore it).
    TEST_KOMPAKT_IO_ERROR=<path fragment>[:<n>]
        From the n-th (default the first) file operation on a path containing <fragment> on, every
        file operation of the storage file layer (segment reads, appends, index writes, flushes,
        checkpoint writes) on such a path raises OSError(EIO), as a failing disk would.
    TEST_KOMPAKT_SYNC_ERROR=<path fragment>[:<n>[:<errno name>]]
        The n-th (default the first) fsync/fdatasync of the storage file layer (files.py) of a
        file whose path contains <fragment> raises OSError (EIO unless an errno name such as ENOSPC
        is given), once: the syncs before and after it succeed, as after a transient write-back
        error on Linux, whose next fsync succeeds without the pages it could not write
        (PostgreSQL's "fsyncgate"). Nothing is synced by the failing call, so the page-cache model
        (TEST_KOMPAKT_POWER_JOURNAL) keeps none of the bytes it should have made durable.
    TEST_KOMPAKT_CLEANER_BREAK=<break>
        The cleaner's worker processes break every clean on purpose (kompakt/cleaner/cleaner.py);
        the live compaction-guarantee check must refuse the swap. Breaks (CLEANER_BREAKS):
        drop_last_batch   the clean loses the last batch it wrote (the newest records of its
                          first group)

    TEST_KOMPAKT_POWER_JOURNAL=<dir>
        Model the page cache (kompakt/storage/power_cut.py): every sync and namespace change of the
        storage file layer (kompakt/storage/files.py) records what a power cut would keep in the
        journal <dir>; a crash point then cuts the power (kills the process and its workers; the
        test applies the journal with power_cut.restore) instead of only killing the process.

(Not KOMPAKT_*: those environment variables are broker config keys.)

Crash points, each named where it sits (the soak in bench/bench_kill_soak.py kills at each):
    file_op               before every operation of the storage file layer (files.py: fsync,
                          fdatasync, directory fsync, rename, unlink, rmdir, rmtree): `file_op:n`
                          cuts before the n-th, so a test can cut at every step of a flow
    segment_roll          Log.roll: the new segment's files exist, the log does not list it yet
    retention_delete      Log._remove_segments: a segment renamed `.deleted`, the next not yet
    checkpoint_write      checkpoint atomic_write: `<name>.tmp` written and fsynced, not renamed
    state_file_write      the same for the broker's JSON state files (ACLs, SCRAM credentials, dynamic
                          configs, client quotas, group configs, feature levels:
                          broker/metadata/store_file.py)
    swap_renamed          Log.replace_segments step 2 done: cleaned segments are `.swap`
    swap_old_deleted      Log.replace_segments step 4 done: old segments are `.deleted`
    before_swap, after_first_group, before_checkpoint, after_checkpoint
                          the cleaner's swap steps (kompakt/cleaner/log_cleaner.py)
    group_rebalance       GroupCoordinator: a rebalance's group metadata is about to be written
    txn_prepare_written   TransactionCoordinator: PrepareCommit/PrepareAbort written, no marker yet
    txn_marker_written    txn/markers.py: one more COMMIT/ABORT marker written (`:n` = the n-th)
    txn_markers_written   TransactionCoordinator: every marker written, CompleteCommit/Abort not yet
    alter_dir_future_created, alter_dir_copying, alter_dir_future_synced, alter_dir_current_renamed,
    alter_dir_future_renamed
                          AlterReplicaLogDirs' steps (kompakt/storage/alter_log_dirs.py): the
                          `-future` dir made; one more chunk copied (`:n` = the n-th); the future
                          caught up and synced; the current dir renamed `-delete`; the future dir
                          renamed live
"""
from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import signal

from kompakt.storage import power_cut

log = logging.getLogger(__name__)

CRASH_ENV = "TEST_KOMPAKT_CRASH_AT"
IO_ERROR_ENV = "TEST_KOMPAKT_IO_ERROR"
SYNC_ERROR_ENV = "TEST_KOMPAKT_SYNC_ERROR"
CLEANER_BREAK_ENV = "TEST_KOMPAKT_CLEANER_BREAK"

CRASH_POINTS = ("file_op", "segment_roll", "retention_delete", "checkpoint_write", "state_file_write", "swap_renamed",
                "swap_old_deleted", "before_swap", "after_first_group", "before_checkpoint", "after_checkpoint",
                "group_rebalance", "txn_prepare_written", "txn_marker_written", "txn_markers_written",
                "alter_dir_future_created", "alter_dir_copying", "alter_dir_future_synced",
                "alter_dir_current_renamed", "alter_dir_future_renamed")
CLEANER_BREAKS = ("drop_last_batch",)


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, sep, n = value.rpartition(":")
    if sep and n.isdigit() and name:
        return name, max(1, int(n))
    return value, 1


_crash = _parse(os.environ.get(CRASH_ENV)) if multiprocessing.parent_process() is None else None
_io = _parse(os.environ.get(IO_ERROR_ENV))
_cleaner_break = os.environ.get(CLEANER_BREAK_ENV) or None   # worker processes read it too
_crash_hits = 0
_io_hits = 0


def _parse_sync(value: str | None) -> tuple[str, int, int] | None:
    """"<fragment>[:<n>[:<errno name>]]" -> (fragment, n, errno)."""
    if not value:
        return None
    fragment, _, rest = value.partition(":")
    n, _, name = rest.partition(":")
    return fragment, max(1, int(n)) if n else 1, getattr(errno, name) if name else errno.EIO


_sync_error = _parse_sync(os.environ.get(SYNC_ERROR_ENV))
_sync_hits = 0


def sync_seams_armed() -> bool:
    """Whether a seam that must see every sync of the storage file layer is armed (a crash point,
    an injected I/O or sync error): the group commit then keeps its syncs in Python, where they
    pass through files.py, instead of its native sync thread."""
    return _crash is not None or _io is not None or _sync_error is not None


def crash_point(name: str) -> None:
    """SIGKILL this process if `name` is the armed point and this is its n-th hit."""
    global _crash_hits
    if _crash is None or _crash[0] != name:
        return
    _crash_hits += 1
    if _crash_hits >= _crash[1]:
        log.error("test hook %s=%s:%d: killing the broker", CRASH_ENV, name, _crash[1])
        for handler in logging.getLogger().handlers:
            handler.flush()
        if os.environ.get(power_cut.JOURNAL_ENV):
            power_cut.kill_tree(os.getpid())       # a power cut: the cleaner's workers die too
        os.kill(os.getpid(), signal.SIGKILL)


def check_io(path: str) -> None:
    """Raise OSError(EIO) for an armed path fragment once its n-th operation is reached."""
    global _io_hits
    if _io is None or _io[0] not in path:
        return
    _io_hits += 1
    if _io_hits >= _io[1]:
        raise OSError(errno.EIO, f"Input/output error (injected by {IO_ERROR_ENV})", path)


def check_sync(fd: int) -> None:
    """Raise the armed OSError at the n-th sync of a file whose path holds the armed fragment
    (TEST_KOMPAKT_SYNC_ERROR; files.py calls it before every fsync/fdatasync)."""
    global _sync_hits
    if _sync_error is None:
        return
    fragment, n, code = _sync_error
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if fragment not in path:
        return
    _sync_hits += 1
    if _sync_hits == n:
        raise OSError(code, f"{os.strerror(code)} (injected by {SYNC_ERROR_ENV})", path)


def cleaner_break(name: str) -> bool:
    """Whether the cleaner's deliberate fault `name` (one of CLEANER_BREAKS) is armed."""
    return _cleaner_break == name


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC / EDQUOT: the disk is full, not failing (see LogManager.handle_io_error)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
