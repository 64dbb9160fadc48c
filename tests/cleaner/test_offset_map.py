"""SkimpyOffsetMap: fixed memory, latest offset wins, fullness and the load factor."""
import hashlib
import random
import tracemalloc

import pytest

from kompakt.cleaner.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap, slots_for_memory


def test_put_get_overwrite():
    m = SkimpyOffsetMap(24 * 1000)
    m.put(b"grape", 0)
    m.put(b"lime", 1)
    m.put(b"grape", 2)
    assert m.get(b"grape") == 2 and m.get(b"lime") == 1 and m.get(b"kiwi") == -1
    assert m.size == 2 and m.latest_offset == 2


def test_many_keys_match_a_dict():
    m = SkimpyOffsetMap(24 * 5000, 0.9)
    model = {}
    rnd = random.Random(7)
    for off in range(20000):
        k = str(rnd.randrange(4000)).encode()
        m.put(k, off)
        model[k] = off
    assert m.size == len(model)
    for k, v in model.items():
        assert m.get(k) == v
    assert m.get(b"absent") == -1


def test_put_many_stops_at_limit():
    m = SkimpyOffsetMap(24 * 100, 0.5)
    digests = [hashlib.md5(str(i).encode()).digest() for i in range(100)]
    n = m.put_many(digests, list(range(100)), m.max_desired_size)
    assert n == m.max_desired_size == m.size
    assert m.latest_offset == n - 1
    # a full map refuses even a key it already holds (Kafka checks the size before each put)
    assert m.put_many(digests[:1], [500], m.max_desired_size) == 0


def test_fills_every_slot_without_looping():
    m = SkimpyOffsetMap(24 * 13, 1.0)
    digests = [hashlib.md5(str(i).encode()).digest() for i in range(m.slots)]
    assert m.put_many(digests, range(m.slots), m.slots) == m.slots
    assert m.get_many(digests) == list(range(m.slots))


def test_clear():
    m = SkimpyOffsetMap(24 * 50)
    for i in range(40):
        m.put(b"a%d" % i, i)
    m.clear()
    assert m.size == 0 and m.latest_offset == -1 and m.get(b"a3") == -1
    assert m.buffer[:] == bytes(len(m.buffer))


def test_slots_prime_and_within_memory():
    for mem in (48, 1000, 24 * 1009, 1 << 20):
        s = slots_for_memory(mem)
        assert s * BYTES_PER_ENTRY <= mem
        assert all(s % f for f in range(2, int(s ** 0.5) + 1))


def test_too_small_map_is_a_clear_error():
    with pytest.raises(ValueError, match="log.cleaner.dedupe.buffer.size"):
        SkimpyOffsetMap(10)


def test_memory_stays_within_buffer_plus_constant():
    memory = 24 * 12_000
    m = SkimpyOffsetMap(memory, 0.9)
    assert len(m.buffer) == m.slots * BYTES_PER_ENTRY <= memory
    tracemalloc.start()
    digests = [hashlib.md5(str(i).encode()).digest() for i in range(10_000)]
    before, _ = tracemalloc.get_traced_memory()
    m.put_many(digests, range(10_000), m.max_desired_size)
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # inserting 10k keys allocates nothing that stays (the buffer was allocated up front)
    assert after - before < 64 * 1024
