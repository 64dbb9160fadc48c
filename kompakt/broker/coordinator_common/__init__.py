"""What the group and transaction coordinators share (Kafka's coordinator-common module).

    internal_topic.py   a coordinator's compacted internal topic (`__consumer_offsets`,
                        `__transaction_state`): created on first use with Kafka's enforced configs,
                        its partition count, and reading its batches back for replay

Invariants: nothing here knows a record format of either coordinator (those live in
kompakt.protocol); creation runs off the event loop when a request triggers it; it imports
neither broker/groups nor broker/txn, so both may import it.
"""
