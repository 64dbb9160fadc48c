"""FetchSessionCache: slots, LRU eviction after the idle time, epochs."""
import random
from collections import OrderedDict

from kompakt.broker.fetch.session import (EVICTION_S, MAX_EPOCH, FetchSessionCache, SessionPartition,
                                          next_epoch)
from kompakt.protocol.codec import FetchPartitionResult


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def parts():
    return OrderedDict({("t", 0): SessionPartition("t", None, 0, 0, 100)})


def test_slots_and_eviction_of_idle_sessions_only():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock, rng=random.Random(1))
    a, b = cache.create(parts()), cache.create(parts())
    assert a.id != b.id and 0 not in (a.id, b.id) and len(cache) == 2
    assert cache.create(parts()) is None                 # full of recent sessions
    clock.now += EVICTION_S
    cache.get(b.id)                                      # b is in use; a is the idle one
    c = cache.create(parts())
    assert c is not None and cache.get(a.id) is None and cache.get(b.id) is b


def test_zero_slots_never_create():
    assert FetchSessionCache(0).create(parts()) is None


def test_epochs_wrap_to_one():
    assert next_epoch(1) == 2 and next_epoch(MAX_EPOCH) == 1


def test_partition_news():
    sp = SessionPartition("t", None, 0, 0, 100)
    same = FetchPartitionResult(0, 0, 5, 5, 0, None, -1, b"")
    assert sp.changed(same)                              # never answered before
    assert not sp.changed(same)
    assert sp.changed(FetchPartitionResult(0, 0, 6, 6, 0, None, -1, b""))     # high watermark moved
    assert sp.changed(FetchPartitionResult(0, 0, 6, 6, 0, None, -1, b"rec"))  # records
    assert sp.changed(FetchPartitionResult(0, 1, 6, 6, 0, None, -1, None))    # error
