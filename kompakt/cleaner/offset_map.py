"""The dedupe map of one cleaner worker: MD5(key) -> latest offset in a fixed buffer (SkimpyOffsetMap).

Role: pass 1 of a clean puts every key of the dirty range with its offset (later offsets overwrite
earlier ones); pass 2 asks, for each record, the latest offset of its key. Keys are never stored,
only their 16-byte MD5, so memory per key is 24 bytes whatever the key size (seed 001, 002).

Memory layout: one anonymous private `mmap` of `slots * 24` bytes, allocated once per worker;
nothing else grows with the number of keys. Pages are zero until first touched, and `clear()`
hands them back with madvise(MADV_DONTNEED) (the kernel zero-fills them again), so a worker that
cleans small logs does not keep 128 MiB resident and clearing costs no memset. One slot:

    offset  size  field
    0       16    MD5 digest of the key bytes
    16      8     offset, int64 big-endian

A slot whose 24 bytes are all zero is empty (Kafka's rule; a key whose MD5 is all zeros with
offset 0 is lost, the same accepted risk as an MD5 collision).

Probing: open addressing with double hashing. `slots` is the largest prime <= buffer / 24, the
first position is digest[0:8] mod slots and the step is 1 + digest[8:16] mod (slots - 1), so a
probe sequence visits every slot and keeps ~1/(1-load) probes for a miss at the configured load
factor (Kafka probes with the digest's ints and then linearly; same idea, fewer clusters).

Invariants: `size` counts occupied slots and never exceeds `slots` (the slots in use by this pass,
at most `capacity_slots`); `latest_offset` is the largest
offset put or explicitly recorded (`update_latest_offset`), -1 when empty; `put` of an existing key
overwrites its offset and does not change `size`. The caller enforces the load factor
(`max_desired_size`), the map only refuses to overflow.
"""
from __future__ import annotations

import ctypes
import hashlib
import mmap
import struct

HASH_SIZE = 16
ENTRY_FORMAT = ">16sq"
BYTES_PER_ENTRY = 24
assert struct.calcsize(ENTRY_FORMAT) == BYTES_PER_ENTRY
_OFFSET = struct.Struct(">q")
_EMPTY = bytes(BYTES_PER_ENTRY)
HUGE_PAGE_THRESHOLD = 16 * 1024 * 1024
_md5 = hashlib.md5


class OffsetMapFullError(RuntimeError):
    pass


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _largest_prime_at_most(n: int) -> int:
    while n > 2 and not _is_prime(n):
        n -= 1
    return max(n, 2)


def _smallest_prime_at_least(n: int) -> int:
    n = max(n, 2)
    while not _is_prime(n):
        n += 1
    return n


def slots_for_memory(memory: int) -> int:
    return _largest_prime_at_most(max(memory // BYTES_PER_ENTRY, 2))


class SkimpyOffsetMap:
    """Fixed-memory open-addressing map; see the module docstring for the layout."""

    def __init__(self, memory: int, load_factor: float = 0.9):
        if memory < 2 * BYTES_PER_ENTRY:
            raise ValueError(f"offset map memory {memory} is below two entries; increase "
                             "log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads")
        self.memory = memory
        self.slots = self.capacity_slots = slots_for_memory(memory)
        self.load_factor = load_factor
        self.max_desired_size = int(self.slots * load_factor)
        if self.max_desired_size < 1:
            raise ValueError(f"offset map of {self.slots} slots at load factor {load_factor} cannot "
                             "hold a single key; increase log.cleaner.dedupe.buffer.size or "
                             "decrease log.cleaner.threads")
        self.capacity_max_desired_size = self.max_desired_size
        self.buffer = mmap.mmap(-1, self.capacity_slots * BYTES_PER_ENTRY,
                                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0
        # for the compiled seam (native.c): the buffer's address and an int64 scratch array
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.buffer))
        self.native_io = (ctypes.c_int64 * 8)()

    # --- basic operations --------------------------------------------------------------------
    def clear(self, expected_keys: int | None = None) -> None:
        """Empty the map. With `expected_keys` (an upper bound on the distinct keys the next pass can
        put, e.g. the record count of the dirty range) only the first slots needed for that many keys
        at the load factor are used: the pass touches fewer pages (cheaper page faults, better cache
        locality) and, since it can never fill before the whole map would, cleans exactly the same
        range as the full map. Without it (or when it does not fit) the whole buffer is used."""
        if expected_keys is None:
            self.slots = self.capacity_slots
        else:
            want = _smallest_prime_at_least(int(expected_keys / self.load_factor) + 2)
            self.slots = want if want < self.capacity_slots else self.capacity_slots
        self.max_desired_size = int(self.slots * self.load_factor)
        self._advise_huge_pages()
        if self.size:
            try:
                self.buffer.madvise(mmap.MADV_DONTNEED)
            except (AttributeError, OSError, ValueError):  # no madvise: zero it by hand
                self.buffer[:] = bytes(len(self.buffer))
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    def _advise_huge_pages(self) -> None:
        """Transparent huge pages for a big active region (random probes then miss the TLB far less
        and fault 2 MiB at a time); small regions stay on 4 KiB pages so small cleans touch little."""
        length = self.slots * BYTES_PER_ENTRY
        advice = getattr(mmap, "MADV_HUGEPAGE" if length >= HUGE_PAGE_THRESHOLD else "MADV_NOHUGEPAGE", None)
        if advice is None:
            return
        try:
            self.buffer.madvise(advice, 0, len(self.buffer))
        except (OSError, ValueError):
            pass

    def put(self, key: bytes, offset: int) -> None:
        self.put_digest(_md5(key).digest(), offset)

    def get(self, key: bytes) -> int:
        return self.get_digest(_md5(key).digest())

    def put_digest(self, digest: bytes, offset: int) -> None:
        if self.put_many((digest,), (offset,), self.slots) != 1:
            raise OffsetMapFullError(f"offset map is full ({self.size} of {self.slots} slots)")

    def get_digest(self, digest: bytes) -> int:
        return self.get_many((digest,))[0]

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    def utilization(self) -> float:
        """Kafka's buffer utilization: entries over the whole buffer's slots."""
        return self.size / self.capacity_slots

    # --- the hot loops (called once per batch by batch_ops) ------------------------------------
    def put_many(self, digests, offsets, limit: int) -> int:
        """Put pairs in order until `size` would pass `limit`; returns how many were put.

        Stops *before* a pair when `size >= limit` (Kafka checks the size before every put, even
        for a key already present), so the caller knows exactly which offsets were mapped.
        """
        buf = self.buffer
        slots = self.slots
        step_mod = slots - 1
        size = self.size
        probes = 0
        from_bytes = int.from_bytes
        pack_into = _OFFSET.pack_into
        empty = _EMPTY
        n = 0
        latest = self.latest_offset
        for digest, offset in zip(digests, offsets):
            if size >= limit:
                break
            i = from_bytes(digest[:8], "big") % slots
            step = 0
            while True:
                probes += 1
                p = i * 24
                cur = buf[p:p + 16]
                if cur == digest:
                    pack_into(buf, p + 16, offset)
                    break
                if cur == empty[:16] and buf[p + 16:p + 24] == empty[:8]:
                    buf[p:p + 16] = digest
                    pack_into(buf, p + 16, offset)
                    size += 1
                    if size > slots:  # unreachable while limit <= slots; kept as the invariant
                        raise OffsetMapFullError("offset map overflow")
                    break
                if not step:
                    step = 1 + from_bytes(digest[8:16], "big") % step_mod
                i += step
                if i >= slots:
                    i -= slots
            n += 1
            if offset > latest:
                latest = offset
        self.size = size
        self.latest_offset = latest
        self.probes += probes
        self.lookups += n
        return n

    def get_many(self, digests) -> list[int]:
        """The offset for each digest, -1 where absent."""
        buf = self.buffer
        slots = self.slots
        step_mod = slots - 1
        from_bytes = int.from_bytes
        unpack_from = _OFFSET.unpack_from
        empty16 = _EMPTY[:16]
        empty8 = _EMPTY[:8]
        out = []
        append = out.append
        probes = 0
        for digest in digests:
            i = from_bytes(digest[:8], "big") % slots
            step = 0
            while True:
                probes += 1
                p = i * 24
                cur = buf[p:p + 16]
                if cur == digest:
                    append(unpack_from(buf, p + 16)[0])
                    break
                if cur == empty16 and buf[p + 16:p + 24] == empty8:
                    append(-1)
                    break
                if not step:
                    step = 1 + from_bytes(digest[8:16], "big") % step_mod
                i += step
                if i >= slots:
                    i -= slots
        self.probes += probes
        self.lookups += len(out)
        return out

    def __repr__(self) -> str:
        return (f"SkimpyOffsetMap(slots={self.slots}/{self.capacity_slots}, size={self.size}, "
                f"latest_offset={self.latest_offset}, memory={self.memory})")
