"""The authorizer's decisions (Kafka's StandardAuthorizer rules) and ACL filter matching, pure."""
from __future__ import annotations

import pytest

from kompakt.broker.security.acl import (AclBinding, AclFilter, Op, PatternType, PermissionType, Res,
                                         binding_matches, validate_binding)
from kompakt.broker.security.acl_store import AclStore
from kompakt.broker.security.authorizer import Authorizer
from kompakt.broker.metadata.store_file import StoreCorruptError

LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY


def acl(rtype, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=LIT):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def az(*bindings, **kw):
    a = Authorizer(**kw)
    a.bindings = list(bindings)
    a._replace(list(bindings))
    return a


def test_no_acl_denies_unless_allow_everyone():
    assert not az().authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "t")
    assert az(allow_everyone_if_no_acl_found=True).authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "t")
    # an ACL on the resource for someone else: no longer "no ACL found" -> denied
    a = az(acl(Res.TOPIC, "t", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert not a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "t")
    assert a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "other")


def test_only_read_write_delete_alter_imply_describe():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert az(acl(Res.TOPIC, "t", op)).authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")
    for op in (Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.CLUSTER_ACTION):
        assert not az(acl(Res.TOPIC, "t", op)).authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t"), op


def test_read_only_cannot_write_but_may_describe():
    a = az(acl(Res.TOPIC, "t", Op.READ))
    assert a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "t")
    assert a.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")       # implied
    assert not a.authorize("User:alice", "h", Op.WRITE, Res.TOPIC, "t")
    assert not a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")


def test_alter_configs_implies_describe_configs_and_all_allows_everything():
    a = az(acl(Res.TOPIC, "t", Op.ALTER_CONFIGS), acl(Res.GROUP, "g", Op.ALL))
    assert a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not a.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")
    assert a.authorize("User:alice", "h", Op.DELETE, Res.GROUP, "g")


def test_deny_wins_and_deny_read_does_not_deny_describe():
    a = az(acl(Res.TOPIC, "*", Op.ALL), acl(Res.TOPIC, "secret", Op.READ, DENY))
    assert a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "public")
    assert not a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "secret")
    assert a.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "secret")
    b = az(acl(Res.TOPIC, "t", Op.READ), acl(Res.TOPIC, "t", Op.ALL, DENY, principal="User:*"))
    assert not b.authorize("User:alice", "h", Op.READ, Res.TOPIC, "t")


def test_prefixed_wildcard_principal_and_host():
    a = az(acl(Res.TOPIC, "orders.", Op.WRITE, pattern=PRE, principal="User:*", host="10.0.0.1"))
    assert a.authorize("User:anyone", "10.0.0.1", Op.WRITE, Res.TOPIC, "orders.eu")
    assert not a.authorize("User:anyone", "10.0.0.2", Op.WRITE, Res.TOPIC, "orders.eu")
    assert not a.authorize("User:anyone", "10.0.0.1", Op.WRITE, Res.TOPIC, "order")
    assert not a.authorize("User:anyone", "10.0.0.1", Op.WRITE, Res.GROUP, "orders.eu")


def test_super_users_and_operations_set():
    a = az(acl(Res.TOPIC, "t", Op.WRITE), super_users={"User:admin"})
    assert a.authorize("User:admin", "h", Op.DELETE, Res.TOPIC, "t")
    assert a.authorized_operations("User:alice", "h", Res.TOPIC, "t") == {Op.WRITE, Op.DESCRIBE}
    assert a.authorized_operations("User:admin", "h", Res.GROUP, "g") == {Op.READ, Op.DESCRIBE, Op.DELETE}


def test_authorize_by_resource_type():
    assert az(acl(Res.TOPIC, "t", Op.WRITE)).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not az(acl(Res.TOPIC, "t", Op.READ)).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    denied = az(acl(Res.TOPIC, "t", Op.WRITE), acl(Res.TOPIC, "*", Op.WRITE, DENY))
    assert not denied.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    covered = az(acl(Res.TOPIC, "ab", Op.WRITE), acl(Res.TOPIC, "a", Op.WRITE, DENY, pattern=PRE))
    assert not covered.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    # Kafka decides first for a resource named "hardcode": no ACL applies to it, so
    # allow.everyone.if.no.acl.found allows, even with other principals' ACLs on other topics
    open_ = az(acl(Res.TOPIC, "x", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert open_.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not az(acl(Res.TOPIC, "x", Op.READ, principal="User:bob")).authorize_by_resource_type(
        "User:alice", "h", Op.WRITE, Res.TOPIC)
    # ... and a DENY of everything does not stop a super user
    assert az(acl(Res.TOPIC, "*", Op.ALL, DENY, principal="User:*"), super_users={"User:admin"}
              ).authorize_by_resource_type("User:admin", "h", Op.WRITE, Res.TOPIC)


@pytest.mark.parametrize("pattern,name,expect", [
    (PatternType.ANY, "t", {"lit-t", "pre-t"}),
    (PatternType.LITERAL, "t", {"lit-t"}),
    (PatternType.PREFIXED, None, {"pre-t", "pre-to"}),
    (PatternType.MATCH, "top", {"lit-star", "pre-t", "pre-to"}),
    (PatternType.MATCH, None, {"lit-t", "lit-star", "pre-t", "pre-to"}),
])
def test_filter_pattern_semantics(pattern, name, expect):
    named = {"lit-t": acl(Res.TOPIC, "t", Op.READ), "lit-star": acl(Res.TOPIC, "*", Op.READ),
             "pre-t": acl(Res.TOPIC, "t", Op.READ, pattern=PRE), "pre-to": acl(Res.TOPIC, "to", Op.READ, pattern=PRE)}
    f = AclFilter(Res.ANY, name, pattern, None, None, Op.ANY, PermissionType.ANY)
    assert {k for k, b in named.items() if binding_matches(f, b)} == expect


def test_validation_and_store_round_trip(tmp_path):
    assert validate_binding(acl(Res.CLUSTER, "other", Op.ALTER)).startswith("The only valid name")
    assert validate_binding(acl(Res.TOPIC, "t", Op.ANY)) is not None
    assert validate_binding(acl(Res.TOPIC, "t", Op.READ, principal="alice")).startswith("Could not parse")
    assert validate_binding(acl(Res.TOPIC, "t", Op.READ)) is None
    store = AclStore(str(tmp_path))
    (tmp_path / "kompakt-acls.json.tmp").write_text("left over by a crash")
    (tmp_path / "kompakt-acls.json.tmp").chmod(0o644)                 # its mode must not survive
    a = Authorizer(store=store)
    a.create([acl(Res.TOPIC, "t", Op.READ), acl(Res.TOPIC, "t", Op.READ), acl(Res.GROUP, "g", Op.READ)])
    assert len(Authorizer(store=store).bindings) == 2
    every_group = AclFilter(Res.GROUP, None, PatternType.ANY, None, None, Op.ANY, PermissionType.ANY)
    removed = a.delete([every_group, every_group])
    assert removed == [[acl(Res.GROUP, "g", Op.READ)], []]     # under the first matching filter only (Kafka)
    assert Authorizer(store=store).bindings == [acl(Res.TOPIC, "t", Op.READ)]
    assert oct((tmp_path / "kompakt-acls.json").stat().st_mode & 0o777) == "0o600"
    raw = (tmp_path / "kompakt-acls.json").read_text().replace('"t"', '"u"')
    (tmp_path / "kompakt-acls.json").write_text(raw)
    with pytest.raises(StoreCorruptError):
        Authorizer(store=store)
