"""The ACL set on disk: `kompakt-acls.json` in the first log dir (Kafka keeps ACLs in its metadata log).

Role: `AclStore(dir).load() -> [AclBinding]` at start, `save(bindings)` after every CreateAcls /
DeleteAcls, rewriting the whole file through metadata/store_file.write_json (temp, fsync, rename, fsync
dir): a crash leaves either the set before the change or the set after it, and the change is
acknowledged to the client only after the rename.

Body: {"acls": [[resource_type, resource_name, pattern_type, principal, host, operation,
permission], ...]} with Kafka's int codes (acl.py), one array per binding, sorted.
"""
from __future__ import annotations

import os

from kompakt.broker.security.acl import AclBinding
from kompakt.broker.metadata.store_file import read_json, write_json

ACL_FILE = "kompakt-acls.json"


class AclStore:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, ACL_FILE)

    def load(self) -> list[AclBinding]:
        body = read_json(self.path)
        if body is None:
            return []
        return [AclBinding(int(t), str(n), int(p), str(pr), str(h), int(o), int(perm))
                for t, n, p, pr, h, o, perm in body["acls"]]

    def save(self, bindings: list[AclBinding]) -> None:
        write_json(self.path, {"acls": sorted(list(b) for b in bindings)})
