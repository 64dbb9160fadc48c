"""How an operator sees the broker: Prometheus metrics, the event-loop lag probe, process logging.

    names.py          every metric name, one constant each, and the naming conventions
    metrics.py        the per-broker registry (`Metrics`, what /metrics serves) and the hot-path
                      counters (requests, topic bytes)
    live.py           the scrape-time collector: figures the other rooms own (logs, cleaner, groups,
                      transactions, limits, authentications), read and never locked
    loop_lag.py       the event-loop lag probe (kompakt_event_loop_lag_seconds)
    logging_setup.py  process-wide logging, one line per event, text or JSON (`--log-format`)

Invariants: observing never changes what it observes: a scrape reads and never locks, a collector
failure is logged and never fails the scrape, a request on the hot path updates plain lists (no lock);
each broker owns its registry (never prometheus-client's global one). Other rooms expose figures
(`stats()`) that are read from here; nothing here is imported by storage, cleaner or protocol.
"""
