"""The storage file layer: every sync and every namespace change the broker makes on disk, and
the disk-block reservation ahead of an active segment's appends.

Role: one place for the operations whose durability a power cut decides (fsync/fdatasync of a file,
fsync of a directory, rename, unlink, rmdir, rmtree), so the test-only page-cache model
(kompakt/storage/power_cut.py, armed by TEST_KOMPAKT_POWER_JOURNAL) sees all of them, and every one
is a crash point (`file_op`, see faults.py) a test can cut at. Plain writes, creates and mkdirs need
no hook: the model treats them as cached until a sync says otherwise.

Invariants: with the seams off each function is the `os`/`shutil` call plus a `None` test or two; no
module of kompakt calls os.fsync, os.fdatasync, os.replace, os.rename, os.unlink, os.remove,
os.rmdir or shutil.rmtree itself (tests/storage/test_power_cut.py greps for it).
"""
from __future__ import annotations

import ctypes
import os
import shutil

from kompakt.storage import power_cut
from kompakt.storage.faults import check_sync, crash_point

_power = power_cut.recorder()          # None unless TEST_KOMPAKT_POWER_JOURNAL is set


def power_model_on() -> bool:
    """Whether the page-cache model (TEST_KOMPAKT_POWER_JOURNAL) records the syncs: only syncs
    made through this module reach it."""
    return _power is not None


def fsync(fd: int) -> None:
    """fsync a file's data and metadata."""
    _sync(fd, os.fsync)


def fdatasync(fd: int) -> None:
    """fdatasync a file (data and size; what recovery needs of a log or index file)."""
    _sync(fd, os.fdatasync)


def _sync(fd: int, op) -> None:
    crash_point("file_op")
    check_sync(fd)
    if _power is None:
        op(fd)
    else:
        _power.sync_file(fd, op)


_FALLOC_FL_KEEP_SIZE = 0x01      # linux/falloc.h
try:
    _fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int
except (AttributeError, OSError):     # no fallocate(2) (not Linux): appends allocate as they go
    _fallocate = None


# Reservations never take the file system's last free space: below this floor (the smaller of
# the two) they are skipped, so a full disk is reached by data, not by room held ahead for it
RESERVE_FLOOR_BYTES = 1 << 30
RESERVE_FLOOR_SHARE = 0.05


def reserve(fd: int, offset: int, length: int) -> bool | None:
    """Allocate the disk blocks of [offset, offset + length) without changing the file's size or
    contents (fallocate(2) with FALLOC_FL_KEEP_SIZE), so the page-cache writes that fill them
    later skip the file system's per-block delayed-allocation work (ext4: ~25% of a buffered
    write's CPU). False when the system or file system cannot: the writes allocate as they go,
    as without it. None (not now) when the reservation would leave the file system less free
    space than its floor (RESERVE_FLOOR_*): each reserved block is one another partition's
    append could not have, so near a full disk nothing is held ahead. A same-size ftruncate
    frees what is left past the end (LogSegment does at roll and close)."""
    if _fallocate is None:
        return False
    try:
        st = os.fstatvfs(fd)
    except OSError:
        return False
    floor = min(RESERVE_FLOOR_BYTES, st.f_blocks * st.f_frsize * RESERVE_FLOOR_SHARE)
    if st.f_bavail * st.f_frsize - length < floor:
        return None
    return _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def fsync_path(path: str) -> None:
    """fsync the file at `path` (opened read-only for it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory so a create, rename or unlink inside it is durable."""
    crash_point("file_op")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        if _power is None:
            os.fsync(fd)
        else:
            _power.sync_dir(fd, path)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def replace(src: str, dst: str) -> None:
    """Atomic rename of `src` over `dst` (durable once the directory is fsynced)."""
    crash_point("file_op")
    if _power is not None:
        _power.keep(dst)
    os.replace(src, dst)


def unlink(path: str, *, missing_ok: bool = False) -> None:
    """Unlink a file (durable once the directory is fsynced)."""
    crash_point("file_op")
    try:
        if _power is not None:
            _power.keep(path)
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def rmdir(path: str) -> None:
    """Remove an empty directory."""
    crash_point("file_op")
    if _power is not None and not os.listdir(path):
        _power.bury(path)               # parked, not freed: its inode number must not come back
        return
    os.rmdir(path)


def rmtree(path: str, *, ignore_errors: bool = False) -> None:
    """Remove a directory tree (durable once its parent directory is fsynced)."""
    crash_point("file_op")
    if _power is not None:
        try:
            _power.bury(path)           # moved aside whole: the same disappearance, inodes kept
            return
        except FileNotFoundError:
            if ignore_errors:
                return
            raise
    shutil.rmtree(path, ignore_errors=ignore_errors)
