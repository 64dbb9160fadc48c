"""Consumer groups - Kafka's classic rebalance protocol, and KIP-848 consumer-protocol groups
(consumer/) - and committed offsets.

    coordinator.py     GroupCoordinator: lifecycle, replay of __consumer_offsets, timers,
                       describe / list / delete groups (the object the broker and handlers use)
    membership.py      JoinGroup / SyncGroup / Heartbeat / LeaveGroup, static members
    offset_manager.py  OffsetCommit / OffsetFetch / OffsetDelete, offset expiry
    group.py           ClassicGroup and its state machine (transition table in the docstring)
    member.py          ClassicMember
    offsets.py         OffsetAndMetadata and Kafka's retention rule
    offsets_topic.py   the __consumer_offsets topic: create, append, replay
    txn_offsets.py     transactional offset commits (TxnOffsetCommit), pending until the marker
    tombstone_guard.py group-safe tombstones: the groups a compacted topic names hold its deletes
                       back (the horizon the cleaner asks for, from committed offsets)
    consumer/          ConsumerGroupHeartbeat / ConsumerGroupDescribe groups (see its __init__)
A group id names a classic group (`GroupCoordinator.groups`) or a consumer-protocol group
(`GroupCoordinator.consumer_groups`), never both; an empty one of either kind makes way for the
other kind when a member of that kind joins.
Record formats live in kompakt.protocol.group_records; the wire handlers in broker/handlers/.
"""
