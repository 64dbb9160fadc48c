"""Consumer groups (Kafka's classic rebalance protocol) and committed offsets.

    coordinator.py     GroupCoordinator: lifecycle, replay of __consumer_offsets, timers,
                       describe / list / delete groups (the object the broker and handlers use)
    membership.py      JoinGroup / SyncGroup / Heartbeat / LeaveGroup, static members
    offset_manager.py  OffsetCommit / OffsetFetch / OffsetDelete, offset expiry
    group.py           ClassicGroup and its state machine (transition table in the docstring)
    member.py          ClassicMember
    offsets.py         OffsetAndMetadata and Kafka's retention rule
    offsets_topic.py   the __consumer_offsets topic: create, append, replay
Record formats live in kompakt.protocol.group_records; the wire handlers in broker/handlers/.
"""
