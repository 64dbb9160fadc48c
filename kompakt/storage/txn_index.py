"""A segment's transaction index (`.txnindex`): the aborted transactions whose ABORT marker it holds.

Role: Kafka's TransactionIndex. read_committed fetches ask it which aborted transactions overlap
the bytes they return (consumers drop those producers' batches), the cleaner asks it which data
batches to drop. Entries are appended when a marker completes an aborted transaction that has
data (the marker lands in the active segment, so does its entry); a transaction may span many
segments, so a search walks forward from the segment holding the fetch offset until it meets an
entry whose last stable offset is at or past the fetch's upper bound.

File `<base offset:020d>.txnindex`, created only when the first entry is appended, a flat array
of 34-byte big-endian entries (Kafka's AbortedTxn, version 0):

    offset  size  field
    0       2     version            int16  = 0
    2       8     producer_id        int64
    10      8     first_offset       int64  first offset of the aborted transaction
    18      8     last_offset        int64  offset of its ABORT marker
    26      8     last_stable_offset int64  the partition's LSO once the marker was written

Invariants: entries are in increasing last_offset order (append refuses otherwise); a file whose
size is not a multiple of 34 or whose entries end before the segment's base offset fails
`sanity_check` (the loader then rebuilds it from the log); every entry is written before the
log's last stable offset moves past it.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from kompakt.storage.offset_index import CorruptIndexError
from kompakt.storage import files as fs

ENTRY_FORMAT = ">hqqqq"
ENTRY_SIZE = 34
assert struct.calcsize(ENTRY_FORMAT) == ENTRY_SIZE
_ENTRY = struct.Struct(ENTRY_FORMAT)
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just ended (Kafka's CompletedTxn): last_offset is the marker's."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def decode_entries(data: bytes, path: str = "<bytes>") -> list[AbortedTxn]:
    out = []
    for i in range(len(data) // ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, i * ENTRY_SIZE)
        if version > CURRENT_VERSION:
            raise CorruptIndexError(f"Unexpected aborted transaction version {version} in transaction "
                                    f"index {path}, current version is {CURRENT_VERSION}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """The `.txnindex` of one segment (see module docstring). Not thread-safe: the Log's lock."""

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None   # loaded on first use

    # ---- reading -------------------------------------------------------------------------------
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._entries = decode_entries(data[: len(data) - len(data) % ENTRY_SIZE], self.path)
        return self._entries

    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), and whether the
        search is complete (an entry's LSO reached the upper bound: later segments cannot add any)."""
        found = []
        for e in self.entries():
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                found.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"Transaction index file {self.path} has size {size}, which is not a "
                                    f"multiple of the entry size {ENTRY_SIZE}")
        self._entries = None
        for e in self.entries():
            if e.last_offset < self.base_offset:
                raise CorruptIndexError(f"Last offset of aborted transaction {e} in index {self.path} is "
                                        f"less than start offset {self.base_offset}")

    # ---- writing -------------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"The last offset of appended transactions must increase sequentially, but "
                             f"{txn.last_offset} is not greater than current last offset "
                             f"{entries[-1].last_offset} of index {self.path}")
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        entries.append(txn)

    def write_all(self, txns: list[AbortedTxn]) -> None:
        """Replace the file's content (recovery rebuild, cleaner output); no file when empty."""
        self.reset()
        if txns:
            with open(self.path, "wb") as f:
                f.write(b"".join(t.encode() for t in txns))
        self._entries = list(txns)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or past `offset` (the log is truncated there)."""
        entries = self.entries()
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            if keep:
                with open(self.path, "r+b") as f:
                    f.truncate(len(keep) * ENTRY_SIZE)
                self._entries = keep
            else:
                self.reset()

    def reset(self) -> None:
        """Remove every entry (and the file: Kafka creates it only when needed)."""
        try:
            fs.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = []

    def flush(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fs.fsync(fd)
        finally:
            os.close(fd)

    def rename_to(self, new_path: str) -> None:
        if os.path.exists(self.path):
            fs.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        try:
            fs.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = []
