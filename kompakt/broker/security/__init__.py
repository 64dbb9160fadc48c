"""Security: listeners and their protocols, TLS, SASL, principals, ACLs.

Modules (each its own job):
  acl.py          Kafka's ACL vocabulary (resource/pattern types, operations), filter matching
  authorizer.py   StandardAuthorizer rules over an index of ACLs; `super.users`, default rule
  acl_store.py    the ACL set on disk, crash-safe
  session.py      per-connection identity: principal, client host, listener, SASL state
  listeners.py    `listeners`, `listener.security.protocol.map`, per-listener config lookup
  tls.py          ssl.SSLContext from Kafka's `ssl.*` keys (PEM), peer principal
  principal.py    `ssl.principal.mapping.rules`
  sasl_*.py       SASL mechanisms (sans-io) and the per-connection SASL state machine
  scram_store.py  SCRAM credentials, salted and hashed, crash-safe

Handlers authorize through `RequestContext.authorize` (broker/network/context.py); nothing else in the
broker needs to import this package except server.py (building it) and network/connection.py (sessions).
"""
