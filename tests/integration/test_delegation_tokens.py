"""The delegation-token APIs (38-41) against a real broker with a PLAINTEXT and a SASL_PLAINTEXT
listener and an authorizer, answered as Kafka 4.0 answers with delegation tokens disabled (its
default: no delegation.token.secret.key), in Kafka's order of checks (handlers/_tokens.py):
not over PLAINTEXT (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, timestamps -1); for another owner
CREATE_TOKENS on that User (DELEGATION_TOKEN_AUTHORIZATION_FAILED); else
DELEGATION_TOKEN_AUTH_DISABLED. Nothing is issued."""
from __future__ import annotations

import pytest

from broker_process import BrokerProcess
from kompakt.protocol.errors import ErrorCode as EC
from wire_support import Wire, req, sub

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_eve="eve-pw";')


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("tokens"), {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
    })
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    proc.start()
    yield proc.port, proc.ports["SASL_PLAINTEXT"]
    proc.kill()


def login(port: int, user: str) -> Wire:
    w = Wire(port)
    w.plain_login(user, f"{user}-pw")
    return w


def create(wire, version, owner=None):
    R = sub(38, "CreatableRenewers")
    fields = dict(renewers=[R(principal_type="User", principal_name="admin")], max_lifetime_ms=-1,
                  owner_principal_type="User" if owner else None, owner_principal_name=owner)
    return wire.call(req(38, **fields), version)


def test_over_plaintext_token_requests_are_not_allowed(ports):
    plain, _ = ports
    wire = Wire(plain)
    for version in (1, 2, 3):
        answer = create(wire, version)
        assert answer.error_code == EC.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert (answer.principal_type, answer.principal_name, answer.token_id, answer.hmac) == ("User", "ANONYMOUS",
                                                                                               "", b"")
        assert (answer.issue_timestamp_ms, answer.expiry_timestamp_ms, answer.max_timestamp_ms) == (-1, -1, -1)
    for key, period in ((39, "renew_period_ms"), (40, "expiry_time_period_ms")):
        for version in (1, 2):
            answer = wire.call(req(key, hmac=b"x", **{period: 1000}), version)
            assert (answer.error_code, answer.expiry_timestamp_ms) == (EC.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
    for version in (1, 2, 3):
        answer = wire.call(req(41, owners=None), version)
        assert (answer.error_code, answer.tokens) == (EC.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, [])
    wire.close()


def test_over_sasl_tokens_are_disabled(ports):
    _, sasl = ports
    eve = login(sasl, "eve")
    mine = create(eve, 3)
    assert mine.error_code == EC.DELEGATION_TOKEN_AUTH_DISABLED
    assert (mine.principal_name, mine.token_requester_principal_name, mine.token_id) == ("eve", "eve", "")
    # a token for someone else needs CREATE_TOKENS on that User (checked before the disabled answer)
    other = create(eve, 3, owner="admin")
    assert (other.error_code, other.principal_name, other.issue_timestamp_ms) == (
        EC.DELEGATION_TOKEN_AUTHORIZATION_FAILED, "admin", -1)
    admin = login(sasl, "admin")
    assert create(admin, 3, owner="eve").error_code == EC.DELEGATION_TOKEN_AUTH_DISABLED   # a super user may
    for key, period in ((39, "renew_period_ms"), (40, "expiry_time_period_ms")):
        answer = eve.call(req(key, hmac=b"x", **{period: 1000}), 2)
        assert answer.error_code == EC.DELEGATION_TOKEN_AUTH_DISABLED
    assert eve.call(req(41, owners=None), 3).error_code == EC.DELEGATION_TOKEN_AUTH_DISABLED
    eve.close()
    admin.close()
