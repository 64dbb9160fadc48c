"""Building the security pieces from a BrokerConfig (the only place that reads their keys).

`build_authorizer(config) -> Authorizer | None`: `authorizer.class.name` empty -> None (every
check allows, at no cost); one of Kafka's authorizer class names -> our StandardAuthorizer with
`super.users`, `allow.everyone.if.no.acl.found` and the ACLs stored in the first log dir; any
other class name -> ConfigError (a custom Java authorizer cannot run here, and silently running
without ACLs would be worse).
"""
from __future__ import annotations

import logging

from kompakt.broker.security.acl_store import AclStore
from kompakt.broker.security.authorizer import AUTHORIZER_CLASS_NAMES, Authorizer, parse_super_users
from kompakt.config.broker_config import ConfigError

log = logging.getLogger(__name__)


def build_authorizer(config) -> Authorizer | None:
    name = (config["authorizer.class.name"] or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"Invalid value {name} for configuration authorizer.class.name: Kompakt provides "
                          f"Kafka's StandardAuthorizer; use org.apache.kafka.metadata.authorizer.StandardAuthorizer "
                          f"(or leave it empty for no authorization)")
    store = AclStore(config.log_dirs[0])
    az = Authorizer(super_users=parse_super_users(config["super.users"]),
                    allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"], store=store)
    log.info("authorizer on: %d ACLs from %s, super users %s, allow.everyone.if.no.acl.found=%s",
             len(az.bindings), store.path, sorted(az.super_users) or "none", az.allow_if_no_acl)
    return az
