"""How an operator sees the broker: Prometheus metrics, the event-loop lag probe, process logging.

    metrics.py        every metric name, the per-broker registry, hot-path counters and the
                      scrape-time collectors (served at /metrics by broker/admin)
    loop_lag.py       the event-loop lag probe (kompakt_event_loop_lag_seconds)
    logging_setup.py  process-wide logging, one line per event, text or JSON (`--log-format`)

Invariants: observing never changes what it observes: a scrape reads and never locks, a collector
failure is logged and never fails the scrape, the hot path pays a list update and nothing more;
each broker owns its registry (never prometheus-client's global one). Other rooms expose figures
(`stats()`) that are read from here; nothing here is imported by storage, cleaner or protocol.
"""
