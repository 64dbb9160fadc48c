"""UpdateFeatures (key 57, v0-2) as Kafka 4.0 answers it on a single-node KRaft cluster, on the
wire and through kafka-python's admin (update_features / describe_features): Kafka's refusal
texts, nothing changed by a refused or validate-only request, the three answer shapes, the new
levels in ApiVersions under a higher epoch, group.version 0 turning ConsumerGroupHeartbeat off,
transaction.version moving within 0-2 (the `__transaction_state` value version following it), and
kompakt-features.json across crashes: the levels survive a SIGKILL and a power cut right after
the answer; a power cut while saving (crash point state_file_write: the temp file written and
synced, not renamed) leaves the old levels and an unanswered request."""
from __future__ import annotations

import os
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import UpdateFeatureType
from kafka.errors import InvalidUpdateVersionError

from kompakt.broker.metadata.store_file import read_json, write_json
from kompakt.protocol.errors import ErrorCode as EC
from wire_support import Wire, heartbeat_request, req, update_features_request

UPGRADE, SAFE, UNSAFE = 1, 2, 3
ALL_FAILED = "The update failed for all features since the following feature had an error: "
DEFAULT = ({"metadata.version": 25, "group.version": 1, "transaction.version": 2, "kraft.version": 1}, 1)


def update(port, updates, version=1, validate_only=False):
    return Wire(port).call(update_features_request(updates, version, validate_only), version)


def finalized(port):
    answer = Wire(port).call(req(18, client_software_name="wire-test", client_software_version="1"), 4)
    return ({f.name: f.max_version_level for f in answer.finalized_features}, answer.finalized_features_epoch)


def heartbeat_code(port, group):
    return Wire(port).call(heartbeat_request(group, "m-" + group, 0, ["uf-topic"]), 1).error_code


REFUSED = [
    # (updates, the reason after ALL_FAILED)
    ([("group.version", 1, 0)],
     "Invalid update version 1 for feature group.version. The controller does not support the given upgrade type."),
    ([("group.version", -1, SAFE)],
     "Invalid update version -1 for feature group.version. A feature version cannot be less than 0."),
    ([("metadata.version", 26, UPGRADE)],
     "Invalid update version 26 for feature metadata.version. Local controller 1 only supports versions 7-25"),
    ([("metadata.version", 0, SAFE)],
     "Invalid update version 0 for feature metadata.version. Local controller 1 only supports versions 7-25"),
    ([("transaction.version", 3, UPGRADE)],
     "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2"),
    ([("transaction.version", 1, UPGRADE)],
     "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this feature "
     "without setting the upgrade type to either safe or unsafe downgrade."),
    ([("no.such.feature", 1, UPGRADE)],
     "Invalid update version 1 for feature no.such.feature. Local controller 1 does not support this feature."),
    ([("no.such.feature", 0, SAFE)],
     "Invalid update version 0 for feature no.such.feature. Feature no.such.feature not found."),
    ([("group.version", 0, UPGRADE)],
     "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
     "setting the upgrade type to either safe or unsafe downgrade."),
    ([("metadata.version", 22, SAFE)],
     "Invalid metadata.version 22. Refusing to perform the requested downgrade because it might delete "
     "metadata information."),
    ([("metadata.version", 22, UNSAFE)],
     "Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this version."),
    ([("kraft.version", 0, SAFE)],
     "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature."),
    # the first refused update refuses the request: the valid one before it is not applied
    ([("metadata.version", 24, SAFE), ("eligible.leader.replicas.version", 1, UPGRADE)],
     "Invalid update version 1 for feature eligible.leader.replicas.version. Local controller 1 does not "
     "support this feature. (Kompakt is a single node and has no eligible leader replicas (KIP-966).)"),
]


@pytest.mark.parametrize("updates,reason", REFUSED)
@pytest.mark.parametrize("version", [1, 2])
def test_a_refused_update_refuses_the_request_with_kafkas_text_and_changes_nothing(
        module_broker, updates, reason, version):
    answer = update(module_broker.port, updates, version)
    assert (answer.error_code, answer.error_message) == (EC.INVALID_UPDATE_VERSION, ALL_FAILED + reason)
    if version == 1:
        assert answer.results == []
    assert finalized(module_broker.port) == DEFAULT


def test_v0_cannot_downgrade_kafka_4_0_reads_no_allow_downgrade(module_broker):
    answer = update(module_broker.port, [("group.version", 0, SAFE)], version=0)
    assert answer.error_code == EC.INVALID_UPDATE_VERSION
    assert "Can't downgrade the version of this feature without setting the upgrade type" in answer.error_message
    assert finalized(module_broker.port) == DEFAULT


def test_validate_only_checks_and_changes_nothing(module_broker):
    answer = update(module_broker.port, [("group.version", 0, SAFE), ("metadata.version", 23, SAFE)],
                    validate_only=True)
    assert (answer.error_code, answer.error_message) == (0, None)
    assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
        ("group.version", 0, "NONE"), ("metadata.version", 0, "NONE")]
    # a level equal to the current one passes with any upgrade type (Kafka writes it again)
    answer = update(module_broker.port, [("metadata.version", 25, SAFE), ("group.version", 1, UNSAFE),
                                         ("transaction.version", 2, SAFE)], validate_only=True)
    assert (answer.error_code, len(answer.results)) == (0, 3)
    assert finalized(module_broker.port) == DEFAULT
    assert heartbeat_code(module_broker.port, "uf-validate") == 0


def test_kafka_python_admin_describes_and_refuses(module_broker):
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=15000)
    try:
        features = admin.describe_features()
        assert features["metadata.version"] == {"supported": (7, 25), "finalized": (25, 25), "finalized_epoch": 1}
        assert features["transaction.version"] == {"supported": (0, 2), "finalized": (2, 2), "finalized_epoch": 1}
        assert admin.update_features({"group.version": (UpdateFeatureType.SAFE_DOWNGRADE, 0)},
                                     validate_only=True) == {"group.version": "OK"}
        with pytest.raises(InvalidUpdateVersionError, match="Local controller 1 only supports versions 0-2"):
            admin.update_features({"transaction.version": 3})
    finally:
        admin.close()
    assert finalized(module_broker.port) == DEFAULT


def test_changes_apply_raise_the_epoch_and_survive_a_kill(start_broker):
    b = start_broker()
    port = b.port
    answer = update(port, [("metadata.version", 24, SAFE)], version=2)       # v2: no per-feature results
    assert (answer.error_code, answer.error_message) == (0, None)
    assert finalized(port) == ({"metadata.version": 24, "group.version": 1, "transaction.version": 2,
                                "kraft.version": 1}, 2)
    assert heartbeat_code(port, "uf-before") == 0
    answer = update(port, [("group.version", 0, SAFE)], version=1)            # delete group.version
    assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [("group.version", 0, "NONE")]
    assert finalized(port) == ({"metadata.version": 24, "transaction.version": 2, "kraft.version": 1}, 3)
    # Kafka's KafkaApis with group.version 0: the consumer protocol is off
    assert heartbeat_code(port, "uf-off") == EC.UNSUPPORTED_VERSION
    b.restart(kill=True)                                                        # SIGKILL after the answers
    assert finalized(port) == ({"metadata.version": 24, "transaction.version": 2, "kraft.version": 1}, 3)
    assert heartbeat_code(port, "uf-off") == EC.UNSUPPORTED_VERSION
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=15000)
    try:
        assert admin.update_features({"group.version": 1, "metadata.version": 25}) == {
            "group.version": "OK", "metadata.version": "OK"}
        assert admin.describe_features()["group.version"] == {"supported": (0, 1), "finalized": (1, 1),
                                                              "finalized_epoch": 4}
    finally:
        admin.close()
    assert heartbeat_code(port, "uf-on") == 0
    b.restart()
    assert finalized(port) == (DEFAULT[0], 4)


def test_a_power_cut_mid_save_keeps_the_old_levels_and_one_after_the_answer_keeps_the_new(
        start_broker, monkeypatch):
    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", "state_file_write")
    b = start_broker(power=True)
    with pytest.raises(AssertionError, match="broker closed the connection"):   # no answer: not acknowledged
        update(b.port, [("group.version", 0, SAFE)])
    deadline = time.monotonic() + 30
    while b.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "test hook TEST_KOMPAKT_CRASH_AT=state_file_write" in b.log_text()
    b.restore_after_crash()
    monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT")
    b.start()                                       # the leftover temp file is ignored
    assert finalized(b.port) == DEFAULT
    assert update(b.port, [("metadata.version", 23, SAFE)]).error_code == 0
    b.cut()                                         # right after the answer: only synced writes stay
    b.start()
    assert finalized(b.port) == ({"metadata.version": 23, "group.version": 1, "transaction.version": 2,
                                  "kraft.version": 1}, 2)


def test_a_stored_level_this_build_does_not_support_stops_the_start_naming_the_file(start_broker):
    b = start_broker()
    assert update(b.port, [("metadata.version", 24, SAFE)]).error_code == 0
    b.stop()
    path = os.path.join(b.log_dir, "kompakt-features.json")
    body = read_json(path)
    assert body == {"epoch": 2, "levels": {"metadata.version": 24, "group.version": 1, "transaction.version": 2,
                                           "kraft.version": 1, "eligible.leader.replicas.version": 0}}
    write_json(path, {**body, "levels": {**body["levels"], "transaction.version": 3}})   # a newer build's
    with pytest.raises(RuntimeError, match="finalized transaction.version level 3 is not supported"):
        b.start()
    assert path in b.log_text()
