"""What the broker keeps for fetchers between and during Fetch requests (the handler itself is
broker/handlers/fetch.py).

    session.py   incremental fetch sessions (KIP-227): a fetcher's partitions remembered between
                 requests, so an incremental request names only what changed
    wait.py      long polls (Kafka's DelayedFetch): a fetch with nothing to return parks until an
                 append to one of its partitions, its max_wait_ms, its connection going, or shutdown

Invariants: both live on the event loop thread (only `FetchWaiters.notify` may be called from any
thread); a wake-up is a hint, never data: the handler re-reads; an unknown session id or a wrong
epoch is answered with Kafka's error code, and the client starts over with a full fetch.
"""
