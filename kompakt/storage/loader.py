"""Load one partition directory: finish interrupted renames, rebuild indexes, recover after a crash.

Role: Kafka's LogLoader. `load_log` turns a `<topic>-<n>/` directory into segments, offsets,
producer state and leader-epoch cache, repairing what Kafka repairs and reporting each repair.

`partition.metadata` (Kafka's PartitionMetadataFile, text, no trailing newline):

    version: 0
    topic_id: <topic id: 16 bytes, URL-safe base64 without padding, e.g. "kJ4Y4u1fQTaS6j7sXJ4pkA">

Steps, in order (each is safe to repeat if the process dies while doing it):
1. Read partition.metadata (a malformed file is reported and left alone; the topic id comes from
   the caller then).
2. Delete leftovers: `*.deleted` (segments whose unlink was pending), `*.tmp` (unfinished
   checkpoint/snapshot writes), `*.cleaned` (cleaner output never swapped in) and index files
   without their `.log`. Files that are none of ours are logged and left alone.
3. `.swap` files (cleaner output renamed in step 2 of Log.replace_segments):
   - if any `.cleaned` file (of any kind) existed, the swap was interrupted before every new segment became
     `.swap`; the `.swap` files at or above the smallest `.cleaned` base offset are deleted and the
     old segments stay (roll back);
   - the remaining swap segments are completed (roll forward): their indexes are rebuilt, live
     segment files whose base offset falls in [smallest swap base, largest swap next offset) are
     deleted (they are what the swap replaces), and the `.swap` suffix is dropped;
   - an index `.swap` whose `.log` is live already (the last step, which renames the `.log`
     first, was cut short) is renamed live too; other index `.swap` files are deleted.
4. Open every segment; an index that is missing or fails its sanity check is rebuilt from the
   `.log` (LogSegment.recover). Segments step 5 recovers are not checked: it rebuilds them anyway.
5. Unclean shutdown (no clean-shutdown marker): every segment from the one holding the recovery
   point onwards is recovered: batches validated (size, magic, CRC32C, monotonic offsets), indexes
   rebuilt (an index equal to the rebuilt one is left as it is), the segment truncated at its first
   invalid batch, and every later segment deleted. As Kafka's recoverSegment, the producer state
   is loaded first (the newest snapshot at or below the first recovered segment, then the batches
   up to it) and fed the recovered batches, which rewrites their `.txnindex`.
   In steps 4 and 5 a valid batch the segment's relative offsets cannot express (a file named
   above its first batch) does not truncate: the segment is split into segments named after
   their batches and the load starts over (Kafka's LogLoader.retryOnOffsetOverflow).
6. Offsets: next offset from the last segment; log start = max(checkpoint, first base offset).
   A log end offset below the log start checkpoint means the tail was lost: every segment is
   deleted and the log restarts empty at the checkpoint (offsets are never handed out twice).
   Recovery point = log end offset after a clean shutdown, else min(checkpoint, log end offset).
7. Leader-epoch cache loaded and clipped to [log start, log end]; producer state loaded from the
   newest snapshot at or below the log end offset and the batches after it replayed (open
   transactions and markers included). A segment step 4 rebuilt also gets its `.txnindex`
   rebuilt: replay then starts at a snapshot at or below it. Snapshots past the log end are
   deleted; newer ones up to it stay (Kafka deletes and rewrites them), and one at the log end is
   kept as the last snapshot taken only if it holds exactly the replayed state.
"""
from __future__ import annotations

import base64
import logging
import os
import struct
import time as _time
import uuid
from dataclasses import dataclass, field

from kompakt.protocol import records as R
from kompakt.storage import segment as S
from kompakt.storage.checkpoint import atomic_write, fsync_dir
from kompakt.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILENAME, LeaderEpochFileCache
from kompakt.storage.offset_index import INT32_MAX, CorruptIndexError
from kompakt.storage.producer_state import ProducerStateManager
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

PARTITION_METADATA_FILENAME = "partition.metadata"
PARTITION_METADATA_VERSION = 0
_SEGMENT_EXTS = (S.LOG_SUFFIX, S.INDEX_SUFFIX, S.TIME_INDEX_SUFFIX, S.TXN_INDEX_SUFFIX)
_FRAMING = struct.Struct(">qi")      # a batch's base offset and length
_LAST_DELTA = struct.Struct(">i")    # its lastOffsetDelta, at byte 23
_KNOWN_FILES = {PARTITION_METADATA_FILENAME, LEADER_EPOCH_CHECKPOINT_FILENAME}


# ---- topic ids and partition.metadata ---------------------------------------------------------
def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_string(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes")
    return uuid.UUID(bytes=raw)


def format_partition_metadata(topic_id: uuid.UUID) -> str:
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id_to_string(topic_id)}"


def parse_partition_metadata(text: str, location: str = "partition.metadata") -> uuid.UUID:
    lines = text.split("\n")
    try:
        key, value = [p.strip() for p in lines[0].split(":", 1)]
        if key != "version" or int(value) != PARTITION_METADATA_VERSION:
            raise ValueError(f"unrecognized version line {lines[0]!r}")
        key, value = [p.strip() for p in lines[1].split(":", 1)]
        if key != "topic_id":
            raise ValueError(f"malformed line {lines[1]!r}")
        topic_id = topic_id_from_string(value)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"Malformed partition metadata file {location}: {exc}") from None
    if topic_id.int == 0:
        raise ValueError(f"Invalid topic ID in partition metadata file ({location})")
    return topic_id


def read_partition_metadata(dir: str) -> uuid.UUID | None:
    path = os.path.join(dir, PARTITION_METADATA_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            return parse_partition_metadata(f.read(), path)
    except FileNotFoundError:
        return None


def write_partition_metadata(dir: str, topic_id: uuid.UUID, *, sync: bool = True) -> None:
    atomic_write(os.path.join(dir, PARTITION_METADATA_FILENAME),
                 format_partition_metadata(topic_id).encode("utf-8"), sync=sync)


# ---- loading -----------------------------------------------------------------------------------
@dataclass
class LoadedLog:
    segments: list
    next_offset: int
    log_start_offset: int
    recovery_point: int
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache
    topic_id: uuid.UUID | None
    repairs: list = field(default_factory=list)
    created_files: bool = False     # the loader created the first segment: its name is not durable yet


def _is_segment_name(name: str) -> bool:
    stem = name.split(".", 1)[0]
    return len(stem) == 20 and stem.isdigit()


def _unlink(path: str) -> None:
    try:
        fs.unlink(path)
    except FileNotFoundError:
        pass


def _delete_segment_files(dir: str, base: int, suffix: str = "") -> None:
    for fn in (S.log_file, S.index_file, S.time_index_file, S.txn_index_file):
        _unlink(fn(dir, base, suffix))


def _open_segment(dir, base, config, time, suffix=""):
    return S.LogSegment(dir, base, index_interval_bytes=config.index_interval_bytes,
                        max_index_size=config.segment_index_bytes, time=time, suffix=suffix)


UNREAD = object()   # load_log's stored_topic_id when the caller has not read partition.metadata


def load_log(dir: str, config, **kw) -> LoadedLog:
    """Load (and repair) the partition directory `dir`; see the module docstring for the steps.
    stored_topic_id: partition.metadata's id as the caller just read it (the LogManager's start-up
    check), so the file is not read twice.

    A segment holding a valid batch its relative offsets cannot express (a file named above its
    first batch's offset, a batch more than 2^31 offsets past the name) is split into segments
    named after their batches and the load starts over (Kafka's LogLoader.retryOnOffsetOverflow
    and LocalLog.splitOverflowedSegment); truncating there would drop it and every later segment.
    """
    no_split: set[int] = set()
    earlier: list[str] = []
    while True:
        try:
            loaded = _load_log_once(dir, config, no_split=frozenset(no_split), **kw)
        except _SplitNeeded as exc:
            earlier += exc.repairs
            msg = split_overflowed_segment(dir, exc.base_offset, exc.other_bases)
            if msg is None:
                no_split.add(exc.base_offset)
            else:
                earlier.append(msg)
                log.warning("%s: %s", dir, msg)
            kw["stored_topic_id"] = UNREAD
            continue
        loaded.repairs[:0] = earlier
        return loaded


class _SplitNeeded(Exception):
    def __init__(self, base_offset: int, other_bases: set, repairs: list):
        super().__init__(base_offset)
        self.base_offset, self.other_bases, self.repairs = base_offset, other_bases, repairs


def split_overflowed_segment(dir: str, base: int, other_bases: set) -> str | None:
    """Rewrite segment `base` as segments named after their batches, each holding the batches
    whose offsets fit its relative offsets, crash-safely: `.cleaned` files, renamed `.swap`
    (highest first), the old segment deleted, the `.swap` suffix dropped (a crash anywhere is
    finished or undone by the next load's steps 2-3). Only the framing is read: recovery checks
    each new segment afterwards, and bytes after the last whole batch go to the last new segment
    (recovery truncates them there, as it would have in the old one). Indexes are rebuilt by the
    next load. None (nothing done) when a new name would collide with another segment."""
    groups: list[list[int]] = []      # [new base, start position, end position]
    fd = os.open(S.log_file(dir, base), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + R.BATCH_OVERHEAD <= size:
            first, length = _FRAMING.unpack(os.pread(fd, 12, pos))
            (delta,) = _LAST_DELTA.unpack(os.pread(fd, 4, pos + 23))
            stop = pos + R.LOG_OVERHEAD + length
            if stop - pos < R.BATCH_OVERHEAD or stop > size:
                break
            if groups and first >= groups[-1][0] and 0 <= first + delta - groups[-1][0] <= INT32_MAX:
                groups[-1][2] = stop
            else:
                groups.append([first, pos, stop])
            pos = stop
        if not groups or any(g[0] in other_bases for g in groups):
            return None
        groups[-1][2] = size   # the tail after the last whole batch
        for new_base, start, stop in groups:
            out = os.open(S.log_file(dir, new_base, S.CLEANED_SUFFIX),
                          os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                while start < stop:
                    chunk = os.pread(fd, min(1 << 20, stop - start), start)
                    if not chunk:
                        break
                    os.write(out, chunk)
                    start += len(chunk)
                fs.fsync(out)
            finally:
                os.close(out)
    finally:
        os.close(fd)
    for new_base, _, _ in reversed(groups):
        fs.replace(S.log_file(dir, new_base, S.CLEANED_SUFFIX), S.log_file(dir, new_base, S.SWAP_SUFFIX))
    fsync_dir(dir)
    _delete_segment_files(dir, base)
    for new_base, _, _ in groups:
        fs.replace(S.log_file(dir, new_base, S.SWAP_SUFFIX), S.log_file(dir, new_base))
    fsync_dir(dir)
    return (f"split segment {S.filename_prefix(base)}, whose offsets its relative offsets cannot "
            f"express, into segments " + ", ".join(S.filename_prefix(g[0]) for g in groups))


def _load_log_once(dir: str, config, *, log_start_offset_checkpoint: int | None = None,
                   recovery_point_checkpoint: int = 0, had_clean_shutdown: bool = True,
                   topic_id: uuid.UUID | None = None, time=_time,
                   producer_id_expiration_ms: int = 86_400_000, stored_topic_id=UNREAD,
                   no_split: frozenset = frozenset()) -> LoadedLog:
    try:
        with os.scandir(dir) as it:   # step 2's directory read, done first: it also says whether dir exists
            entries = sorted((e.name, e.is_file()) for e in it)
    except FileNotFoundError:
        os.makedirs(dir, exist_ok=True)
        fsync_dir(os.path.dirname(os.path.abspath(dir)))  # the new partition dir must survive a crash
        entries = []
    repairs: list[str] = []

    def repaired(msg: str) -> None:
        repairs.append(msg)
        log.warning("%s: %s", dir, msg)

    # 1. partition.metadata
    try:
        stored_id = read_partition_metadata(dir) if stored_topic_id is UNREAD else stored_topic_id
    except (ValueError, UnicodeDecodeError) as exc:
        # written unsynced at creation (start-up derives it from the topic store), so a power cut
        # can leave it empty: rewritten below when the caller knows the id
        repaired(f"unreadable {PARTITION_METADATA_FILENAME} ({exc}); "
                 + ("rewritten from the topic store" if topic_id is not None else "left as is"))
        stored_id = None
    if stored_id is not None and topic_id is not None and stored_id != topic_id:
        log.warning("%s: partition.metadata holds topic id %s, expected %s", dir,
                    topic_id_to_string(stored_id), topic_id_to_string(topic_id))
    if topic_id is None:
        topic_id = stored_id
    elif stored_id is None:
        write_partition_metadata(dir, topic_id, sync=False)   # derived again if a cut loses it

    # 2. leftovers (one directory read, above; the entry types come with it, no stat per file)
    names = {name for name, _ in entries}
    cleaned_bases: list[int] = []
    swap_bases: list[int] = []
    log_bases: set[int] = set()
    snapshot_offsets: list[int] = []
    for name, is_file in entries:
        if not is_file:
            log.info("%s: ignoring foreign entry %s", dir, name)
            continue
        seg_name = _is_segment_name(name)
        if seg_name and name.endswith(S.LOG_SUFFIX):
            log_bases.add(S.offset_from_filename(name))
        elif seg_name and name.endswith(S.SNAPSHOT_SUFFIX):
            snapshot_offsets.append(S.offset_from_filename(name))
        elif seg_name and name.endswith(_SEGMENT_EXTS):
            pass  # index files: checked against their .log below
        elif name in _KNOWN_FILES:
            pass
        elif name.endswith(S.DELETED_SUFFIX):
            _unlink(os.path.join(dir, name))
            names.discard(name)
            repaired(f"deleted leftover {name}")
        elif name.endswith(".tmp"):
            _unlink(os.path.join(dir, name))
            names.discard(name)
            repaired(f"deleted temporary file {name}")
        elif seg_name and name.endswith(S.CLEANED_SUFFIX):
            # every kind counts (Kafka's minCleanedFileOffset): a crash inside one segment's
            # renames leaves its .log .swap and an index (the .txnindex last) .cleaned
            cleaned_bases.append(S.offset_from_filename(name))
            _unlink(os.path.join(dir, name))
            names.discard(name)
            repaired(f"deleted unfinished cleaner output {name}")
        elif seg_name and name.endswith(S.SWAP_SUFFIX):
            if name.endswith(S.LOG_SUFFIX + S.SWAP_SUFFIX):
                swap_bases.append(S.offset_from_filename(name))
        else:
            log.warning("%s: foreign file %s left alone", dir, name)

    # 3. swap files
    if swap_bases:
        min_cleaned = min(cleaned_bases) if cleaned_bases else None
        keep = []
        for base in swap_bases:
            if min_cleaned is not None and base >= min_cleaned:
                _delete_segment_files(dir, base, S.SWAP_SUFFIX)
                repaired(f"rolled back interrupted swap: deleted {S.filename_prefix(base)}.log.swap")
            else:
                keep.append(base)
        if keep:
            swaps = []
            for base in keep:
                for fn in (S.index_file, S.time_index_file):  # indexes are rebuilt below
                    _unlink(fn(dir, base, S.SWAP_SUFFIX))
                seg = _open_segment(dir, base, config, time, S.SWAP_SUFFIX)
                seg.recover()
                swaps.append(seg)
            lo = min(s.base_offset for s in swaps)
            hi = max(s.read_next_offset() for s in swaps)
            for base in sorted(log_bases):
                if lo <= base < hi and base not in keep:
                    _delete_segment_files(dir, base)
                    log_bases.discard(base)
                    repaired(f"deleted segment {S.filename_prefix(base)} replaced by an interrupted swap")
            for seg in swaps:
                if seg.base_offset in log_bases:
                    _delete_segment_files(dir, seg.base_offset)
                seg.close()
                seg.change_file_suffixes(S.SWAP_SUFFIX, "")
                log_bases.add(seg.base_offset)
                repaired(f"completed interrupted swap of segment {S.filename_prefix(seg.base_offset)}")
            fsync_dir(dir)
            names = set(os.listdir(dir))   # the swap renamed and deleted files

    # index .swap files whose .log.swap is gone, and orphan index files
    min_cleaned = min(cleaned_bases) if cleaned_bases else None
    for name in sorted(names):
        if not _is_segment_name(name):
            continue
        if name.endswith(S.SWAP_SUFFIX):
            base = S.offset_from_filename(name)
            live = name[: -len(S.SWAP_SUFFIX)]
            if base in log_bases and (min_cleaned is None or base < min_cleaned):
                # the swap's last step (drop .swap, .log first) was cut short: its .log is live,
                # these are its indexes (Kafka renames every remaining valid .swap file live)
                fs.replace(os.path.join(dir, name), os.path.join(dir, live))
                names.discard(name)
                names.add(live)
                repaired(f"completed interrupted swap of {live}")
                continue
            _unlink(os.path.join(dir, name))
            names.discard(name)
            repaired(f"deleted orphaned swap file {name}")
        elif name.endswith((S.INDEX_SUFFIX, S.TIME_INDEX_SUFFIX, S.TXN_INDEX_SUFFIX)):
            if S.offset_from_filename(name) not in log_bases:
                _unlink(os.path.join(dir, name))
                names.discard(name)
                repaired(f"deleted orphaned index file {name}")

    # 4. open segments, rebuilding missing or corrupt indexes. After an unclean shutdown the
    # segments from the one holding the recovery point on are recovered in step 5 anyway (indexes
    # rebuilt from the .log): their indexes are not checked first.
    cache = LeaderEpochFileCache(dir)
    segments = []
    rebuild_txn: set[int] = set()   # segments step 4 rebuilt: their .txnindex is rewritten by the replay
    bases = sorted(log_bases)
    recover_from = None             # first base offset step 5 recovers
    truncation = None               # (segment, bytes, later segments deleted, their bytes): step 5's cut
    if not had_clean_shutdown and bases:
        recover_from = max((b for b in bases if b <= recovery_point_checkpoint), default=bases[0])
    for base in bases:
        prefix = S.filename_prefix(base)
        seg = _open_segment(dir, base, config, time)
        segments.append(seg)
        if recover_from is not None and base >= recover_from:
            continue
        missing = prefix + S.INDEX_SUFFIX not in names or prefix + S.TIME_INDEX_SUFFIX not in names
        reason = "missing index" if missing else None
        if reason is None:
            try:
                seg.sanity_check()
            except CorruptIndexError as exc:
                reason = str(exc)
        if reason is not None:
            truncated = _recover_or_split(segments, seg, bases, repairs, no_split,
                                          leader_epoch_cache=cache)
            rebuild_txn.add(base)
            repaired(f"rebuilt indexes of segment {S.filename_prefix(base)} ({reason})"
                     + (f", truncated {truncated} bytes" if truncated else ""))

    # 5. unclean shutdown: recover from the recovery point (the last segment keeps its indexes
    # preallocated: it stays the active one). As Kafka's recoverSegment, the producer state is first
    # brought to the start of the first recovered segment (the newest snapshot at or below it, or
    # below a segment step 4 rebuilt, then the batches up to it); the recovered batches feed it as
    # they are validated, which rebuilds their `.txnindex` in the same read.
    psm = ProducerStateManager(dir, producer_id_expiration_ms=producer_id_expiration_ms, time=time,
                               snapshot_offsets=snapshot_offsets)
    psm.remove_stray_snapshots(bases)
    if recover_from is not None:
        start = max(log_start_offset_checkpoint or 0, segments[0].base_offset)
        replay_from = psm.load(start, None, replay_to=min(rebuild_txn | {recover_from}))
        replay_producer_state(segments, psm, replay_from, recover_from, cache, rebuild_txn)
        i = next(j for j, seg in enumerate(segments) if seg.base_offset == recover_from)
        while i < len(segments):
            seg = segments[i]
            last = i == len(segments) - 1
            truncated = _recover_or_split(segments, seg, bases, repairs, no_split, psm,
                                          leader_epoch_cache=cache,
                                          index_size=config.segment_index_bytes if last else None)
            if truncated:
                later = segments[i + 1:]
                truncation = (seg.base_offset, truncated, len(later), sum(s.size for s in later))
                for s in later:
                    s.delete()
                del segments[i + 1:]
            i += 1

    # 6. offsets
    if log_start_offset_checkpoint is None:
        log_start_offset_checkpoint = 0
    wiped = False
    # the log end: a segment step 5 just recovered knows it (and its max timestamp) already
    recovered_last = recover_from is not None and segments and segments[-1].base_offset >= recover_from
    if segments:
        next_offset = segments[-1].recovered_next_offset if recovered_last else segments[-1].read_next_offset()
    if segments and next_offset < log_start_offset_checkpoint:
        # Kafka's deleteSegmentsIfLogStartGreaterThanLogEnd: the tail up to the checkpointed log
        # start is gone (files deleted, or unflushed data lost after DeleteRecords/retention moved
        # the start). Offsets below it were handed out already, so the log restarts empty at the
        # log start offset instead of assigning them again.
        repaired(f"log end offset {next_offset} is below the log start offset "
                 f"{log_start_offset_checkpoint}: deleted every segment, the log restarts there")
        for seg in segments:
            seg.delete()
        segments = []
        cache.clear_and_flush()
        wiped = True
    created_files = not segments
    if not segments:
        first = _open_segment(dir, max(log_start_offset_checkpoint, 0), config, time)
        if getattr(config, "preallocate", False):
            first.preallocate(config.segment_bytes)
        segments.append(first)
        recovered_last = False
    active = segments[-1]
    active.resize_indexes(config.segment_index_bytes)
    if not recovered_last:
        active.reload_max_timestamp()  # a log copied from a live broker lacks the final time entry
        next_offset = active.read_next_offset()
    log_start = max(log_start_offset_checkpoint, segments[0].base_offset)
    recovery_point = next_offset if had_clean_shutdown else min(recovery_point_checkpoint, next_offset)
    if truncation is not None:      # one line per truncated log: where it ends now and what went
        base, cut, n, cut_later = truncation
        repaired(f"recovery truncated the log to end at offset {next_offset}: {cut} bytes of segment "
                 f"{S.filename_prefix(base)} from its first invalid batch"
                 + (f", and {n} later segment(s) ({cut_later} bytes)" if n else ""))
    if recover_from is not None and next_offset < recovery_point_checkpoint:
        repaired(f"log end offset {next_offset} is below the recovery point checkpoint "
                 f"{recovery_point_checkpoint}: records the checkpoint counted as synced are gone "
                 f"(a disk or file system that lost synced writes)")

    # 7. leader epochs and producer state (after an unclean shutdown step 5 brought the producer
    # state to the log end already)
    cache.truncate_from_end(next_offset, keep_current=True)
    cache.truncate_from_start(log_start)
    if cache.unreadable and not cache.entries() and next_offset > log_start:
        # The first epoch of a new log is written unsynced (LogManager._create_log): a power cut
        # can leave the file empty while synced batches survive. The batches carry their epochs
        # (a file that is missing is left missing, as Kafka: a clean load does not scan).
        for seg in segments:
            for _, hdr, _, _ in seg.iter_batches(0):
                if hdr.partition_leader_epoch >= 0 and hdr.base_offset >= log_start:
                    cache.assign(hdr.partition_leader_epoch, hdr.base_offset, sync=False)
        if cache.entries():
            repaired(f"leader-epoch-checkpoint empty or unreadable: rebuilt from the batches "
                     f"({len(cache.entries())} epoch(s))")
    if wiped:
        psm.truncate_fully_and_start_at(log_start)
    elif recover_from is not None:
        psm.load_done(log_start, next_offset)
    else:
        rebuild_txn &= {s.base_offset for s in segments}
        # A segment whose .txnindex is rebuilt is replayed from its start, with the transactions
        # open there: from a snapshot at or below it. Kafka deletes the newer ones
        # (truncateAndReload) and writes a snapshot at the log end again after the replay; here
        # those up to the log end stay, and one at the log end spares the next close a write.
        replay_to_snapshot = min(rebuild_txn) if rebuild_txn else next_offset
        replay_from = psm.load(log_start, next_offset, replay_to=replay_to_snapshot)
        if (psm.latest_snapshot_offset() is None and had_clean_shutdown and len(segments) > 2
                and not rebuild_txn):
            # No snapshot at all (e.g. logs written before snapshots existed): like Kafka, only the
            # last two segments are scanned instead of the whole log.
            replay_from = max(replay_from, segments[-2].base_offset)
        replay_producer_state(segments, psm, replay_from, next_offset, cache, rebuild_txn)
    psm.replayed_to(next_offset)
    return LoadedLog(segments, next_offset, log_start, recovery_point, psm, cache, topic_id, repairs,
                     created_files)


def _recover_or_split(segments, seg, bases, repairs, no_split, *args, **kw) -> int:
    """seg.recover(...); a batch overflowing its relative offsets closes the segments opened so
    far and asks load_log to split `seg` and start over (unless splitting it was refused)."""
    try:
        return seg.recover(*args, split_overflow=seg.base_offset not in no_split, **kw)
    except S.SegmentOffsetOverflowError as exc:
        log.warning("%s", exc)
        for s in segments:
            s.close()
        raise _SplitNeeded(seg.base_offset, set(bases) - {seg.base_offset}, repairs) from None


def replay_producer_state(segments, psm: ProducerStateManager, from_offset: int, to_offset: int,
                          cache: LeaderEpochFileCache | None = None,
                          rebuild_txn_index: frozenset | set = frozenset()) -> None:
    """Feed every batch in [from_offset, to_offset) to the producer state (and epoch cache).

    Markers complete transactions as they did when appended; for the segments whose base offset
    is in `rebuild_txn_index` (each replayed from its start) the `.txnindex` is rewritten from
    the aborted transactions their markers complete.
    """
    if from_offset >= to_offset:
        psm.map_end_offset = max(psm.map_end_offset, to_offset)
        return
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= from_offset:
            continue
        rebuild = seg.base_offset in rebuild_txn_index and seg.base_offset >= from_offset
        aborted: list | None = [] if rebuild else None
        _, pos = seg.offset_index.lookup(from_offset)
        for _, hdr, buf, p in seg.iter_batches(pos):
            if hdr.last_offset < from_offset:
                continue
            if hdr.base_offset >= to_offset:
                break
            S.replay_batch(psm, buf, p, hdr, aborted)
            if cache is not None and hdr.partition_leader_epoch >= 0:
                cache.assign(hdr.partition_leader_epoch, hdr.base_offset)
        if rebuild:
            seg.txn_index.write_all(aborted)
    psm.map_end_offset = to_offset
