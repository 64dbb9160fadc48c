"""What the cleaner did lately, kept in memory for the web console: passes and dirty ratios.

Role: two bounded records, filled by the cleaner's threads and read by the console (admin
threads). Kafka keeps none of this (its cleaner logs one summary per pass and exports the last
pass's figures as gauges); the console draws it as a timeline.

  passes  the last MAX_PASSES cleaning passes, oldest first: when, which partition, bytes read and
          written, duration, records read and written (removed = read - written), tombstones
          kept and held back for consumer groups, the dirty ratio the pass started from.
  dirty   per compacted partition, its dirty ratio (cleanable bytes / (clean + cleanable)) at
          each selection round the cleaner runs (every log.cleaner.backoff.ms while idle, and
          right after each pass), at most one sample per MIN_SAMPLE_INTERVAL_MS (the first
          of the rounds in that time), the last
          MAX_SAMPLES of each; a partition that stops being selectable (deleted topic, policy
          changed) is dropped at the next round.

Invariants: bounded memory (MAX_PASSES + partitions x MAX_SAMPLES small tuples); recording never
raises into the cleaner; readers get copies taken under the lock, so a page never sees a deque
change under it. Lost at restart, like Kafka's gauges.
"""
from __future__ import annotations

import threading
from collections import deque

MAX_PASSES = 500
MAX_SAMPLES = 240                 # an hour at the default 15 s log.cleaner.backoff.ms
MIN_SAMPLE_INTERVAL_MS = 1000


class CleanerHistory:
    def __init__(self, max_passes: int = MAX_PASSES, max_samples: int = MAX_SAMPLES):
        self._lock = threading.Lock()
        self._passes: deque = deque(maxlen=max_passes)
        self._dirty: dict = {}            # (topic, partition) -> deque of (time ms, ratio)
        self._max_samples = max_samples

    def record_pass(self, time_ms: int, tp, stats, dirty_ratio_before: float, first_dirty_offset: int,
                    end_offset: int) -> None:
        entry = {"time_ms": int(time_ms), "topic": tp[0], "partition": int(tp[1]),
                 "bytes_read": int(stats.bytes_read), "bytes_written": int(stats.bytes_written),
                 "duration_s": float(stats.elapsed_secs),
                 "records_read": int(stats.messages_read), "records_written": int(stats.messages_written),
                 "records_removed": int(stats.messages_read - stats.messages_written),
                 "tombstones_retained": int(stats.tombstones_retained),
                 "tombstones_held_back": int(stats.tombstones_held_back),
                 "dirty_ratio_before": float(dirty_ratio_before),
                 "first_dirty_offset": int(first_dirty_offset), "end_offset": int(end_offset)}
        with self._lock:
            self._passes.append(entry)

    def sample_dirty(self, time_ms: int, ratios: dict) -> None:
        """`ratios` is {tp: dirty ratio} of every compacted partition the cleaner just looked at."""
        with self._lock:
            for tp in [tp for tp in self._dirty if tp not in ratios]:
                del self._dirty[tp]
            for tp, ratio in ratios.items():
                key = (tp[0], int(tp[1]))
                samples = self._dirty.get(key)
                if samples is None:
                    samples = self._dirty[key] = deque(maxlen=self._max_samples)
                elif samples and time_ms - samples[-1][0] < MIN_SAMPLE_INTERVAL_MS:
                    # keep the first of a burst of rounds: it saw the partition before the pass
                    # the round chose (a clean is followed at once by another round)
                    continue
                samples.append((int(time_ms), float(ratio)))

    def passes(self, topic: str | None = None, partition: int | None = None) -> list[dict]:
        with self._lock:
            out = [dict(p) for p in self._passes]
        if topic is not None:
            out = [p for p in out if p["topic"] == topic and (partition is None or p["partition"] == partition)]
        return out

    def dirty(self, topic: str | None = None) -> dict:
        """{(topic, partition): [(time ms, ratio), ...]} oldest first."""
        with self._lock:
            return {tp: list(s) for tp, s in self._dirty.items() if topic is None or tp[0] == topic}
