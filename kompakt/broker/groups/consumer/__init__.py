"""KIP-848 consumer-protocol groups (`group.protocol=consumer`): the broker assigns partitions
and every member moves to its share on its own, without stopping the others.

    heartbeat.py   ConsumerGroupHeartbeat: join, heartbeat, leave, fencing, timers, regexes
                   (the mixin of GroupCoordinator; its docstring walks through one heartbeat)
    admin.py       ConsumerGroupDescribe, replay at start, OffsetCommit/OffsetFetch member-epoch
                   checks, deletion, and what classic requests find in a consumer group
    group.py       ConsumerGroup: the image of the group's records and its state (rule table)
    member.py      ConsumerGroupMember and the member state machine (transition table)
    reconcile.py   one member's step towards its target (Kafka's CurrentAssignmentBuilder)
    assignors.py   the `uniform` and `range` server-side assignors
    regex.py       `subscribed_topic_regex`: RE2's subset of Python's `re`, resolution
    records.py     the records a group writes (built from the model) and their encoding

Epochs: the *group epoch* moves when membership, a subscription or the subscribed topics
change; the assignor then writes a *target assignment* at that epoch; each member's *member
epoch* reaches it once the member owns exactly its target - after revoking what it loses
(acknowledged in a heartbeat) and receiving what another member released. Everything is kept
in `__consumer_offsets` with Kafka 4's record types 3-8 and 16 (kompakt.protocol.
consumer_group_records) and rebuilt from them at start.
"""
