"""ACLs and SCRAM credentials across a SIGKILL, with real processes (crash point state_file_write,
kompakt/storage/faults.py: the new file written and fsynced, not yet renamed into place).

A change the broker dies in the middle of saving is not acknowledged and is absent after the
restart (the old set loads, the leftover temp file is ignored); an acknowledged change survives a
SIGKILL right after its answer."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from broker_process import BrokerProcess
from security_support import TIMEOUT_S

CRASH_ENV = "TEST_KOMPAKT_CRASH_AT"
ACL = AclBinding(ResourceType.TOPIC, "crash-topic", ResourcePatternType.LITERAL, "User:carol", "*",
                 AclOperation.READ, AclPermissionType.ALLOW)
EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


def acls(admin) -> list:
    return admin.describe_acls(EVERY_ACL).result(TIMEOUT_S)


def upsert(admin, user: str) -> dict:
    return admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw-" + user.encode())])


def scram_users(admin, users) -> set:
    found = set()
    for user, f in admin.describe_user_scram_credentials(users).items():
        try:
            f.result(TIMEOUT_S)
            found.add(user)
        except KafkaException:                 # RESOURCE_NOT_FOUND: no credential
            pass
    return found


def wait_dead(proc: BrokerProcess) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while proc.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not proc.running, "the crash point did not fire"


@pytest.mark.parametrize("store", ["acls", "scram"])
def test_a_change_is_there_after_a_crash_exactly_when_it_was_acknowledged(tmp_path, monkeypatch, store):
    proc = BrokerProcess(tmp_path / "broker", {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",            # the PLAINTEXT admin below
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    monkeypatch.setenv(CRASH_ENV, "state_file_write")
    proc.start()
    sasl_port = proc.ports["SASL_PLAINTEXT"]              # the same after the restart below
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap, "socket.timeout.ms": 5000})
        with pytest.raises(KafkaException):      # the broker dies saving it: no acknowledgement
            if store == "acls":
                admin.create_acls([ACL])[ACL].result(TIMEOUT_S)
            else:
                upsert(admin, "dora")["dora"].result(TIMEOUT_S)
        wait_dead(proc)
        assert f"test hook {CRASH_ENV}=state_file_write" in proc.log_text()
        monkeypatch.delenv(CRASH_ENV)
        proc.start()                             # the temp file is left over: ignored
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        if store == "acls":
            assert acls(admin) == []
            admin.create_acls([ACL])[ACL].result(TIMEOUT_S)
        else:
            assert scram_users(admin, ["dora"]) == set()
            upsert(admin, "dora")["dora"].result(TIMEOUT_S)
        proc.kill()                              # right after the acknowledgement
        proc.start()
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        if store == "acls":
            assert acls(admin) == [ACL]
        else:
            assert scram_users(admin, ["dora"]) == {"dora"}
            sasl = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dora",
                                "sasl.password": "pw-dora"})
            assert sasl.list_topics(timeout=TIMEOUT_S).brokers        # the stored keys log her in
    finally:
        proc.kill()
