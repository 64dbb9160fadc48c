"""Feature flags (KIP-584): the levels this node supports and the cluster's finalized levels.

Kafka keeps the finalized levels in its metadata log (FeatureLevelRecord) and changes them through
UpdateFeatures on the active controller; a single node keeps them in one state file.

    levels.py   what Kompakt supports (SUPPORTED), the finalized levels and their epoch, loaded
                from and saved to kompakt-features.json (crash-safe, one file)
    update.py   Kafka's rules for an UpdateFeatures request (FeatureControlManager.updateFeatures):
                which change is refused and with what message; no I/O

Readers: ApiVersions (supported and finalized features, the epoch), ConsumerGroupHeartbeat and
ConsumerGroupDescribe (group.version >= 1 enables KIP-848 groups), the transaction coordinator
(transaction.version: the `__transaction_state` value version, and whether its own aborts bump
the epoch). Writer: UpdateFeatures.
"""
