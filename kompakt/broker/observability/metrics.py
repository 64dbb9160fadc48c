"""The broker's metric registry and the figures counted on the hot path.

Role: one `Metrics` object per broker owns a `CollectorRegistry` (never prometheus-client's global
default, so two brokers in one test process never share figures) and registers each metric exactly
once; `render()` is what GET /metrics serves. Metric names and conventions: names.py.

Two kinds of figures:
1. Events counted on the hot path (requests, bytes in/out): plain Python lists per API or topic,
   written only by the event loop (`HotPathCollector`; 1.3 us per request for count, latency
   histogram and bytes, instead of 3.3 us with prometheus-client's locked Counter + Histogram),
   exported at scrape time; a deleted topic's rows are dropped at the next scrape. Rare events
   (errors, connections) use ordinary prometheus-client metrics.
2. State that lives in other objects (log sizes and offsets, cleaner state, groups, transactions):
   read at scrape time by live.py's `LiveCollector`, which `attach(broker)` registers, so the hot
   path pays nothing; its per-partition families follow the registry's output in `render()`.
"""
from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client import disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from prometheus_client.process_collector import ProcessCollector

from kompakt.broker.observability.names import (BROKER_INFO, BROKER_UPTIME, BROKER_CONNECTIONS,
    BROKER_CONNECTIONS_CREATED, BROKER_READY, EVENT_LOOP_LAG, EVENT_LOOP_LAG_MAX, REQUESTS, REQUEST_DURATION,
    REQUEST_ERRORS, REQUEST_BYTES, RESPONSE_BYTES, QUOTA_THROTTLED, QUOTA_THROTTLE_TIME, TOPIC_BYTES_IN,
    TOPIC_BYTES_OUT, TOPIC_MESSAGES_IN, TOPIC_MESSAGES_OUT)
from kompakt.broker.observability.live import LiveCollector

log = logging.getLogger(__name__)

# `*_created` series double every counter's output and no dashboard of ours reads them. This is a
# process-wide switch of prometheus-client's exposition (not a registry), so it is safe to flip here.
disable_created_metrics()

# Every name (names.py) is a classic (legacy-charset) Prometheus name, so the 0.0.4 text format
# that every Prometheus server (Debian's 2.x included) parses is exact; newer clients' 1.0.0 adds
# nothing.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Request latency buckets in seconds: sub-millisecond produce up to long-polling fetches
# (fetch.max.wait.ms defaults to 500 ms; clients may ask for more).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)


def _error_name(code: int) -> str:
    try:
        from kompakt.protocol.errors import ErrorCode
        return ErrorCode(code).name
    except (ImportError, ValueError):
        return str(code)


class Metrics:
    """The broker's metrics. Hot-path helpers: `observe_request`, `record_produce`, `record_fetch`,
    `connection_opened`, `connection_closed`. `attach(broker)` adds the scrape-time collector."""

    def __init__(self, partition_labels: bool = True, *, clock: Callable[[], float] = time.monotonic,
                 process_metrics: bool = True):
        self.partition_labels = partition_labels
        self.registry = CollectorRegistry()
        self._clock = clock
        self._started = clock()
        self._live: LiveCollector | None = None
        r = self.registry

        self.broker_info = Info(BROKER_INFO, "Broker identity: version, node id, cluster id. "
                                "Kafka: kafka.server:type=app-info (version, commit-id).", registry=r)
        self.uptime = Gauge(BROKER_UPTIME, "Seconds since this broker process started. "
                            "Kafka: java.lang:type=Runtime,name=Uptime (ms there).", registry=r)
        self.uptime.set_function(lambda: self._clock() - self._started)
        self.ready = Gauge(BROKER_READY, "1 once logs are loaded and listeners are bound, else 0. "
                           "Kafka: kafka.server:type=KafkaServer,name=BrokerState.", registry=r)
        self.connections = Gauge(BROKER_CONNECTIONS, "Open client connections. "
                                 "Kafka: kafka.server:type=socket-server-metrics,name=connection-count.",
                                 registry=r)
        self.loop_lag = Gauge(EVENT_LOOP_LAG, "How late the event loop's lag probe woke last time (a stall "
                              "every connection waited through; broker/observability/loop_lag.py). Kafka: none (its "
                              "network threads: kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent).",
                              registry=r)
        self.loop_lag_max = Gauge(EVENT_LOOP_LAG_MAX, "Longest event-loop stall the lag probe saw since start. Kafka: none.",
                                  registry=r)
        self.connections_created = Counter(
            BROKER_CONNECTIONS_CREATED, "Client connections accepted since start. "
            "Kafka: kafka.server:type=socket-server-metrics,name=connection-creation-total.", registry=r)

        self.request_errors = Counter(
            REQUEST_ERRORS, "Error codes returned, by API and Kafka error name (partition-level errors "
            "included). Kafka: kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=<api>,error=<error>.",
            ["api", "error"], registry=r)
        self.quota_throttled = Counter(
            QUOTA_THROTTLED, "Produce/Fetch answers throttled by a client byte-rate quota, by quota type. "
            "Kafka: kafka.server:type={Produce,Fetch},user=,client-id= throttle-time (count).",
            ["quota_type"], registry=r)
        self.quota_throttle_time = Counter(
            QUOTA_THROTTLE_TIME, "Throttle time given to clients over a byte-rate quota, by quota type. "
            "Kafka: kafka.server:type={Produce,Fetch},user=,client-id= throttle-time.",
            ["quota_type"], registry=r)
        # Requests and topic traffic are counted on every request: plain lists updated by the one
        # writer (the event loop), exported by HotPathCollector at scrape time.
        self.hot = HotPathCollector(LATENCY_BUCKETS)
        r.register(self.hot)
        if process_metrics:
            ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ...

        self._err_children: dict[tuple[str, int], Any] = {}

    # --- identity ---------------------------------------------------------------------------------
    def set_info(self, *, node_id: Any = "", cluster_id: Any = "", version: str | None = None) -> None:
        if version is None:
            from kompakt import __version__ as version
        self.broker_info.info({"version": str(version), "node_id": str(node_id),
                               "cluster_id": str(cluster_id or "")})

    # --- hot path ---------------------------------------------------------------------------------
    def observe_request(self, api: str, seconds: float, error_code: int = 0,
                        request_bytes: int = 0, response_bytes: int = 0) -> None:
        """One request handled: count it, time it, and count its top-level error code if any."""
        row = self.hot.requests.get(api)
        if row is None:
            row = self.hot.new_request_row(api)
        row[bisect_left(self.hot.bounds, seconds)] += 1
        row[-3] += seconds
        row[-2] += request_bytes
        row[-1] += response_bytes
        if error_code:
            self.record_error(api, error_code)

    def record_error(self, api: str, error_code: int, count: int = 1) -> None:
        """An error code put on the wire (top-level or per partition)."""
        key = (api, int(error_code))
        child = self._err_children.get(key)
        if child is None:
            child = self._err_children[key] = self.request_errors.labels(api, _error_name(key[1]))
        child.inc(count)

    def record_quota_throttle(self, quota_type: str, throttle_ms: int) -> None:
        """A client throttled by its `produce` or `fetch` byte-rate quota (rare: not the hot path)."""
        self.quota_throttled.labels(quota_type).inc()
        self.quota_throttle_time.labels(quota_type).inc(throttle_ms / 1000.0)

    def record_produce(self, topic: str, nbytes: int, nmessages: int) -> None:
        row = self.hot.topics.get(topic)
        if row is None:
            row = self.hot.topics[topic] = [0, 0, 0, 0]
        row[0] += nbytes
        row[1] += nmessages

    def record_fetch(self, topic: str, nbytes: int, nmessages: int | None = None) -> None:
        row = self.hot.topics.get(topic)
        if row is None:
            row = self.hot.topics[topic] = [0, 0, 0, 0]
        row[2] += nbytes
        if nmessages:
            row[3] += nmessages

    def connection_opened(self) -> None:
        self.connections.inc()
        self.connections_created.inc()

    def connection_closed(self) -> None:
        self.connections.dec()

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's series so dashboards stop showing it."""
        self.hot.topics.pop(topic, None)

    # --- scrape -----------------------------------------------------------------------------------
    def attach(self, broker: Any) -> None:
        """Register the scrape-time collector reading `broker.log_manager` and `broker.cleaner`.
        Idempotent: a second call only re-targets the broker."""
        if self._live is None:
            self._live = LiveCollector(broker, self.partition_labels)
            self.registry.register(self._live)
        else:
            self._live.broker = broker

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (what GET /metrics serves)."""
        if self._live is not None:
            ready = bool(getattr(self._live.broker, "ready", False))
            self.ready.set(1 if ready else 0)
            if ready:
                self._forget_deleted_topics()
        body = generate_latest(self.registry)
        if self._live is not None:
            body += self._live.partition_text().encode()
        return body

    def _forget_deleted_topics(self) -> None:
        """Like Kafka's BrokerTopicStats.removeMetrics on topic deletion: traffic series of topics
        the LogManager no longer has stop being exported."""
        topics = getattr(getattr(self._live.broker, "log_manager", None), "topics", None)
        if not isinstance(topics, Mapping):
            return
        for topic in [t for t in list(self.hot.topics) if t not in topics]:
            self.hot.topics.pop(topic, None)


class HotPathCollector:
    """Request and topic-traffic figures kept as plain lists, written only by the event loop.

    A prometheus-client Counter or Histogram takes a lock and walks its buckets on every call
    (about 3 us per request for count + histogram + bytes); a list slot increment costs a tenth
    of that. Rows: requests[api] = [bucket counts (len(bounds)), +Inf count, sum seconds, request
    bytes, response bytes]; topics[topic] = [bytes in, messages in, bytes out, messages out].
    `collect()` (run by a scrape, possibly in a thread) copies each row first, so the cumulative
    buckets it exports are consistent with the count it derives from them.
    """

    def __init__(self, buckets: Iterable[float]):
        self.bounds = tuple(float(b) for b in buckets)
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self.requests: dict[str, list] = {}
        self.topics: dict[str, list] = {}

    def new_request_row(self, api: str) -> list:
        row = [0] * (len(self.bounds) + 1) + [0.0, 0, 0]
        self.requests[api] = row
        return row

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        count = CounterMetricFamily(REQUESTS, "Requests handled, by Kafka API name. "
                                    "Kafka: kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<api>.",
                                    labels=["api"])
        hist = HistogramMetricFamily(REQUEST_DURATION, "Time from a request's arrival to its response being "
                                     "queued, by API. Kafka: kafka.network:type=RequestMetrics,name=TotalTimeMs,"
                                     "request=<api> (ms there).", labels=["api"])
        req_bytes = CounterMetricFamily(REQUEST_BYTES, "Request bytes received, by API. "
                                        "Kafka: kafka.network:type=RequestMetrics,name=RequestBytes,request=<api>.",
                                        labels=["api"])
        resp_bytes = CounterMetricFamily(RESPONSE_BYTES, "Response bytes sent, by API. Kafka: kafka.network:"
                                         "type=RequestMetrics,name=ResponseSendTimeMs (bytes here).", labels=["api"])
        for api, row in sorted(list(self.requests.items())):
            snap = list(row)
            cumulative, buckets = 0, []
            for le, n in zip(self._les, snap[:len(self._les)]):
                cumulative += n
                buckets.append((le, cumulative))
            hist.add_metric([api], buckets, snap[-3])
            count.add_metric([api], cumulative)
            req_bytes.add_metric([api], snap[-2])
            resp_bytes.add_metric([api], snap[-1])
        yield from (count, hist, req_bytes, resp_bytes)
        fams = [
            CounterMetricFamily(TOPIC_BYTES_IN, "Record-batch bytes appended by producers, by topic. "
                                "Kafka: kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=<topic>.",
                                labels=["topic"]),
            CounterMetricFamily(TOPIC_MESSAGES_IN, "Records appended by producers, by topic. "
                                "Kafka: kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=<topic>.",
                                labels=["topic"]),
            CounterMetricFamily(TOPIC_BYTES_OUT, "Record-batch bytes served to fetchers, by topic. "
                                "Kafka: kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=<topic>.",
                                labels=["topic"]),
            CounterMetricFamily(TOPIC_MESSAGES_OUT, "Records served to fetchers, by topic, when the fetch "
                                "path counts them. Kafka has no direct twin; closest: kafka.server:"
                                "type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec.", labels=["topic"]),
        ]
        for topic, row in sorted(list(self.topics.items())):
            snap = list(row)
            for fam, value in zip(fams, snap):
                fam.add_metric([topic], value)
        yield from fams
