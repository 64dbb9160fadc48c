"""The broker's small state files in the first log dir, beside the topic store and the ACLs:

    kompakt-broker-configs.json   dynamic broker configs (config/dynamic.py):
                                  {"default": {key: value}, "broker": {key: value}}
    kompakt-client-quotas.json    client quotas (broker/quotas/manager.py, ClientQuotas):
                                  {"quotas": [[[[entity type, name or null], ...], {key: value}], ...]}
    kompakt-group-configs.json    dynamic group configs (broker/groups/group_configs.py):
                                  {"groups": {group id: {key: value}}}
    kompakt-features.json         finalized feature levels (broker/features/levels.py):
                                  {"epoch": int, "levels": {feature: level}}

(Kafka keeps all four in its metadata log; a single node keeps each as one file.) Each is written
whole by store_file.write_json (this room): temp file, fsync, rename, fsync dir, with a CRC32C of
the body, so a crash leaves the old content or the new, and a damaged file stops the start with
the path named rather than silently dropping settings.
"""
from __future__ import annotations

import os

from kompakt.broker.metadata.store_file import read_json, write_json

BROKER_CONFIGS_FILE = "kompakt-broker-configs.json"
CLIENT_QUOTAS_FILE = "kompakt-client-quotas.json"
GROUP_CONFIGS_FILE = "kompakt-group-configs.json"
FEATURES_FILE = "kompakt-features.json"


# the four above; every file the broker keeps in a log dir's root is server.root_files()
STATE_FILES = frozenset({BROKER_CONFIGS_FILE, CLIENT_QUOTAS_FILE, GROUP_CONFIGS_FILE, FEATURES_FILE})


class StateFile:
    """One JSON state file: `load()` (None when missing) and `save(body)` (atomic)."""

    def __init__(self, directory: str, name: str):
        self.path = os.path.join(directory, name)

    def load(self):
        return read_json(self.path)

    def save(self, body) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_json(self.path, body)
