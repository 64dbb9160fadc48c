"""Incremental fetch sessions (KIP-227): the broker remembers a fetcher's partitions between requests.

Role: a Fetch request names (session_id, session_epoch):

  session_id  epoch   meaning                                      we answer
  ----------  ------  -------------------------------------------  --------------------------------
  0           -1      sessionless full fetch                       every partition, session id 0
  0           0       full fetch, open a session                   every partition, a new session id
                                                                   (0 when no slot is free)
  X           0       close X, open a new one (full fetch)         as above
  X           -1      close X, sessionless full fetch              every partition, session id 0
  X           N > 0   incremental: the request carries only        only partitions with news: records,
                      added/changed partitions and forgotten ones  an error, or a changed high watermark,
                                                                   last stable offset or log start offset;
                                                                   when it forgets the last partition:
                                                                   X closed, answered sessionless (id 0)

An incremental request with an unknown X gets FETCH_SESSION_ID_NOT_FOUND, one with the wrong epoch
INVALID_FETCH_SESSION_EPOCH, one by topic ids (v13+) to a session opened by names (v7-12) or the
reverse FETCH_SESSION_TOPIC_ID_ERROR (the session is left as it was); the client then starts over
with a full fetch.

Invariants: at most `max.incremental.fetch.session.cache.slots` sessions; when full, the least
recently used session idle for `EVICTION_S` is evicted for a new one, else no session is created.
A session's partitions keep request order; the offsets the broker last *answered* (high watermark,
LSO, log start) are what "changed" is measured against. Sessions live in the event loop thread.
"""
from __future__ import annotations

import random
import time
from collections import OrderedDict

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
EVICTION_S = 120.0          # Kafka's min.incremental.fetch.session.eviction.ms


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class SessionPartition:
    __slots__ = ("name", "topic_id", "index", "fetch_offset", "max_bytes",
                 "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, name, topic_id, index, fetch_offset, max_bytes):
        self.name = name
        self.topic_id = topic_id
        self.index = index
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.high_watermark = self.last_stable_offset = self.log_start_offset = -2   # never answered

    def changed(self, result) -> bool:
        """Whether `result` (a FetchPartitionResult) carries news for the client, remembering it."""
        news = self.has_news(result)
        self.remember(result)
        return news

    def has_news(self, result) -> bool:
        """`changed` without remembering (a quota-throttled answer tells the client nothing)."""
        return (result.error_code != 0 or bool(result.records)
                or result.high_watermark != self.high_watermark
                or result.last_stable_offset != self.last_stable_offset
                or result.log_start_offset != self.log_start_offset)

    def remember(self, result) -> None:
        self.high_watermark = result.high_watermark
        self.last_stable_offset = result.last_stable_offset
        self.log_start_offset = result.log_start_offset


class FetchSession:
    __slots__ = ("id", "epoch", "partitions", "last_used", "uses_topic_ids")

    def __init__(self, session_id: int, partitions: "OrderedDict[tuple, SessionPartition]", now: float,
                 uses_topic_ids: bool = False):
        self.id = session_id
        self.epoch = 1                  # the epoch the next incremental request must carry
        self.partitions = partitions    # key (topic name or id, partition) -> SessionPartition
        self.last_used = now
        self.uses_topic_ids = uses_topic_ids    # opened by v13+: keyed by topic id, only v13+ may use it


class FetchSessionCache:
    def __init__(self, max_slots: int, *, clock=time.monotonic, rng: random.Random | None = None):
        self.max_slots = max_slots
        self._clock = clock
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()   # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = self._clock()
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, partitions: "OrderedDict[tuple, SessionPartition]",
               uses_topic_ids: bool = False) -> FetchSession | None:
        """A new session over `partitions`, or None when every slot is taken by a recent session."""
        if self.max_slots <= 0:
            return None
        now = self._clock()
        if len(self._sessions) >= self.max_slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < EVICTION_S:
                return None
            del self._sessions[oldest_id]
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(1, MAX_EPOCH)
        session = FetchSession(session_id, partitions, now, uses_topic_ids)
        self._sessions[session_id] = session
        return session
