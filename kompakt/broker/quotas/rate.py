"""A byte rate measured as Kafka measures quotas: Rate over a SampledTotal (Kafka's metrics
library, org.apache.kafka.common.metrics.stats.{SampledStat, Rate}), and the throttle time of
a violation (QuotaUtils.throttleTime).

Samples: up to `samples + 1` windows of `window_ms` each (the extra one overlaps the start of the
monitored span), each holding (start ms, last event ms, total, event count). Recording into a
window that is complete (now - start >= window_ms) moves to the next slot, recycling the oldest.
Before measuring, a sample whose last event is `samples * window_ms` old is reset (obsolete).

    rate        = sum of the samples' totals / window size (in seconds)
    window size = now - oldest sample's start, but at least (samples - 1) full windows plus the
                  elapsed part of the current one (so a young sensor does not report a huge rate),
                  and at least 1 ms
    throttle    = round((rate - quota) / quota * window size) ms, when rate > quota

Times are passed in (ms); nothing here reads a clock.
"""
from __future__ import annotations

_START, _LAST, _VALUE, _COUNT = 0, 1, 2, 3


class Rate:
    __slots__ = ("samples", "current", "window_ms", "num_samples", "last_record_ms")

    def __init__(self, window_ms: int, num_samples: int):
        self.window_ms = window_ms
        self.num_samples = num_samples
        self.samples: list[list] = []
        self.current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current(now_ms)
        if now_ms - sample[_START] >= self.window_ms:
            sample = self._advance(now_ms)
        sample[_VALUE] += value
        sample[_COUNT] += 1
        sample[_LAST] = now_ms
        self.last_record_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second over the retained windows."""
        self._purge(now_ms)
        total = sum(s[_VALUE] for s in self.samples)
        return total / (self._window_size(now_ms) / 1000.0)

    def window_size(self, now_ms: int) -> int:
        self._purge(now_ms)
        return self._window_size(now_ms)

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """0 when the rate is within `bound`, else how long until it would be (Kafka's rounding)."""
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        return int(round((rate - bound) / bound * self._window_size(now_ms)))

    # -- SampledStat -----------------------------------------------------------------------------
    def _current(self, now_ms: int) -> list:
        if not self.samples:
            self.samples.append([now_ms, now_ms, 0.0, 0])
        return self.samples[self.current]

    def _advance(self, now_ms: int) -> list:
        self.current = (self.current + 1) % (self.num_samples + 1)
        if self.current >= len(self.samples):
            sample = [now_ms, now_ms, 0.0, 0]
            self.samples.append(sample)
            return sample
        sample = self.samples[self.current]
        sample[:] = [now_ms, now_ms, 0.0, 0]
        return sample

    def _purge(self, now_ms: int) -> None:
        expire = self.num_samples * self.window_ms
        for sample in self.samples:
            if now_ms - sample[_LAST] >= expire:
                sample[:] = [now_ms, now_ms, 0.0, 0]

    def _window_size(self, now_ms: int) -> int:
        if not self.samples:
            self.samples.append([now_ms, now_ms, 0.0, 0])
        oldest = min(s[_START] for s in self.samples)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.num_samples - 1:
            elapsed += (self.num_samples - 1 - full) * self.window_ms
        return max(elapsed, 1)
