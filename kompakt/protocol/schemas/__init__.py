"""Message schemas kafka-python 3.0 does not ship, in the JSON form its schema classes load.

Role: the few APIs Kompakt serves whose request/response definitions are missing from
`kafka.protocol` (kafka-python 3.0.12). Each file here describes one message the way Kafka's
message definitions do (apiKey, type, validVersions, flexibleVersions, fields with versions),
written from the protocol documentation's field list; `registry.py` turns each pair into
kafka-python `ApiMessage` classes (`load_json=` this package), so framing, decoding and encoding
go through the same compiled codecs as every other API.

When a kafka-python release ships one of these, registry.py should use its classes instead and
the file here goes away (tests/protocol/test_registry.py checks the field layout either way).
"""
