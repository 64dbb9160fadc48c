"""Bytes <-> objects only: framing, request headers and bodies, record batches and the internal
topics' records. Sans-io: nothing here opens a socket or a file.

    framing.py        the 4-byte size prefix and frames (large requests into buffers of their own)
    codec.py          request/response headers and bodies (kafka-python schemas, hot-path codecs)
    registry.py       API key -> message classes; schemas/ holds what kafka-python lacks
    txn_codec.py      hand-written codecs of the per-transaction requests
    records.py        record batches, magic v2: header, CRC, records, compression
    errors.py         Kafka's error codes and the exceptions that carry them
    group_records.py, consumer_group_records.py, consumer_protocol.py, txn_records.py
                      `__consumer_offsets` / `__transaction_state` records, the consumer protocol

Invariant: the bottom layer: imports nothing of kompakt but the native seam (tests/test_layers.py).
"""
