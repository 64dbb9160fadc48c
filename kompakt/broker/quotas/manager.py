"""Client quotas: what AlterClientQuotas stores and the byte-rate throttling of Produce and Fetch
(Kafka's ClientQuotaManager with its DefaultQuotaCallback).

Stored: entity -> {key: value} (entities.py), persisted whole after each change through the
store (kompakt-client-quotas.json in the first log dir, crash-safe: temp, fsync, rename) before
the AlterClientQuotas answer; loaded at start.

Enforced: producer_byte_rate (request bytes of Produce) and consumer_byte_rate (response bytes of
Fetch), each a `QuotaType`. For a client (user = the principal's name, client id from the
request header) the quota that applies is the first entity found in Kafka's order:
    1 user + client-id   2 user + default client-id   3 user   4 default user + client-id
    5 default user + default client-id   6 default user   7 client-id   8 default client-id
and the clients it covers share one sensor (keyed by Kafka's metric tags: a user-level quota
is shared by all that user's client ids, a client-id quota by every user of that id). Each
sensor is a rates.Rate over `quota.window.num` windows of `quota.window.size.seconds`; a
request is recorded, then the rate compared with the quota: over it, the throttle time is
(rate - quota) / quota * window size (QuotaUtils.throttleTime, not capped for byte rates).
The handler answers with that throttle_time_ms and the connection stops reading requests for
that long (context.throttle_ms; Kafka mutes the channel, for every version since KIP-219).
Sensors idle for an hour are dropped (Kafka's InactiveSensorExpirationTimeSeconds), swept once a
minute, when the cache of resolved clients is emptied too, so neither grows without bound.

Cost when no quota of a type is set: one attribute test (`QuotaType.enabled`) per request.

request_percentage, controller_mutation_rate and ip connection_creation_rate are accepted,
stored and described as Kafka does, but not enforced (a WARNING says so when one is set).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from kompakt.broker.quotas import entities as E
from kompakt.broker.quotas.rate import Rate
from kompakt.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SENSOR_EXPIRATION_MS = 3_600_000
SWEEP_INTERVAL_MS = 60_000


def user_of(principal: str) -> str:
    """Kafka's principal name: `User:alice` -> `alice`."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class QuotaType:
    """The sensors and limits of one quota key (producer_byte_rate or consumer_byte_rate)."""

    def __init__(self, key: str, window_ms: int, num_samples: int):
        self.key = key
        self.window_ms = window_ms
        self.num_samples = num_samples
        self.enabled = False
        self.limits: dict[tuple, float] = {}       # entity -> bound, for this key only
        self.sensors: dict[tuple[str, str], Rate] = {}
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float | None]] = {}
        self._next_sweep_ms = 0

    def set_limits(self, limits: dict[tuple, float]) -> None:
        self.limits = limits
        self._resolved = {}
        self.enabled = bool(limits)

    # -- Kafka's DefaultQuotaCallback ------------------------------------------------------------
    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """(metric tags, quota bound or None) for one client."""
        key = (user, client_id)
        found = self._resolved.get(key)
        if found is None:
            tags = self._tags(user, client_id)
            found = self._resolved[key] = (tags, self._limit(*tags))
        return found

    def _tags(self, user: str, client_id: str) -> tuple[str, str]:
        has = self.limits.__contains__
        u, c = ((E.USER, user),), ((E.CLIENT_ID, client_id),)
        default_u, default_c = ((E.USER, None),), ((E.CLIENT_ID, None),)
        if has(E.entity_key(u + c)) or has(E.entity_key(u + default_c)):
            return user, client_id
        if has(u):
            return user, ""
        if has(E.entity_key(default_u + c)) or has(E.entity_key(default_u + default_c)):
            return user, client_id
        if has(default_u):
            return user, ""
        return "", client_id

    def _limit(self, user: str, client_id: str) -> float | None:
        get = self.limits.get
        if user and client_id:
            for entity in (((E.CLIENT_ID, client_id), (E.USER, user)), ((E.CLIENT_ID, None), (E.USER, user)),
                           ((E.CLIENT_ID, client_id), (E.USER, None)), ((E.CLIENT_ID, None), (E.USER, None))):
                if entity in self.limits:
                    return self.limits[entity]
            return None
        if user:
            bound = get(((E.USER, user),))
            return bound if bound is not None else get(((E.USER, None),))
        if client_id:
            bound = get(((E.CLIENT_ID, client_id),))
            return bound if bound is not None else get(((E.CLIENT_ID, None),))
        return None

    # -- recording -------------------------------------------------------------------------------
    def record(self, principal: str, client_id: str | None, value: float, now_ms: int) -> int:
        """Record `value` for the client; the throttle time in ms (0 = within its quota)."""
        tags, bound = self.resolve(user_of(principal), client_id or "")
        sensor = self._sensor(tags, now_ms)
        sensor.record(value, now_ms)
        if bound is None:
            return 0
        return sensor.throttle_ms(bound, now_ms)

    def throttle_time(self, principal: str, client_id: str | None, now_ms: int) -> int:
        """The throttle time the client has now, recording nothing (0: within its quota)."""
        tags, bound = self.resolve(user_of(principal), client_id or "")
        sensor = self.sensors.get(tags)
        return 0 if bound is None or sensor is None else sensor.throttle_ms(bound, now_ms)

    def unrecord(self, principal: str, client_id: str | None, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers empty: Kafka's unrecordQuotaSensor)."""
        tags, _ = self.resolve(user_of(principal), client_id or "")
        self._sensor(tags, now_ms).record(-value, now_ms)

    def max_value_in_window(self, principal: str, client_id: str | None) -> int | None:
        """The most one request may take without certain throttling (caps a fetch's max_bytes);
        None when no quota covers the client (Kafka's Double.MaxValue: no cap). Once another
        client has a quota, `enabled` is true for every client, so this None is the common case."""
        _, bound = self.resolve(user_of(principal), client_id or "")
        if bound is None:
            return None
        return int(bound * (self.num_samples - 1) * self.window_ms / 1000.0)

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> Rate:
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = self.sensors[tags] = Rate(self.window_ms, self.num_samples)
        if now_ms >= self._next_sweep_ms:
            self._next_sweep_ms = now_ms + SWEEP_INTERVAL_MS
            idle = [t for t, s in self.sensors.items()
                    if now_ms - s.last_record_ms > SENSOR_EXPIRATION_MS and s is not sensor]
            for t in idle:
                del self.sensors[t]
            # the resolution cache holds every (user, client id) seen since the last sweep, not
            # every one ever seen (clients that make up client ids would grow it without end)
            self._resolved = {}
        return sensor


class ClientQuotas:
    """All quota entities, their persistence, and the two enforced quota types."""

    def __init__(self, config, store=None):
        window_ms = config["quota.window.size.seconds"] * 1000
        num_samples = config["quota.window.num"]
        self.store = store
        self.entities: dict[tuple, dict[str, float]] = {}   # replaced whole on change, never mutated
        self._lock: asyncio.Lock | None = None
        self.produce = QuotaType(E.PRODUCER_BYTE_RATE, window_ms, num_samples)
        self.fetch = QuotaType(E.CONSUMER_BYTE_RATE, window_ms, num_samples)

    # -- persistence -----------------------------------------------------------------------------
    def load(self) -> None:
        body = self.store.load() if self.store is not None else None
        if not body:
            return
        for pairs, values in body.get("quotas", []):
            self.entities[E.entity_key((str(t), n) for t, n in pairs)] = {str(k): float(v) for k, v in values.items()}
        self._apply()
        log.info("client quotas: %d entities loaded", len(self.entities))

    def _save(self, entities: dict) -> None:
        if self.store is not None:
            self.store.save({"quotas": [[[list(p) for p in entity], values]
                                        for entity, values in sorted(entities.items(), key=_sort_key)]})

    def _apply(self) -> None:
        for qtype in (self.produce, self.fetch):
            qtype.set_limits({entity: values[qtype.key] for entity, values in self.entities.items()
                              if qtype.key in values})

    # -- DescribeClientQuotas ---------------------------------------------------------------------
    def describe(self, components, strict: bool) -> list[tuple[tuple, dict[str, float]]]:
        """The entities matching a filter, with their quotas; raises QuotaError."""
        exact, present = E.parse_filter(components)
        return [(entity, dict(values)) for entity, values in sorted(self.entities.items(), key=_sort_key)
                if E.matches(entity, exact, present, strict)]

    # -- AlterClientQuotas ------------------------------------------------------------------------
    async def alter(self, entries: Iterable[tuple[list, list]], validate_only: bool) -> list[tuple[int, str | None]]:
        """entries: [(entity pairs, [(key, value, remove)])]; one (error code, message) per entry,
        in order. Accepted changes are persisted (once, in a worker thread: the store fsyncs) and
        take effect before this returns; alters run one at a time, so none loses another's."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            results, changes = self._prepare(list(entries))
            if validate_only or not changes:
                return results
            after = dict(self.entities)
            for entity, values in changes.items():
                if values:
                    after[entity] = values
                else:
                    after.pop(entity, None)
            await asyncio.to_thread(self._save, after)
            self.entities = after
            self._apply()
        for entity, values in changes.items():
            unenforced = sorted(set(values) - E.ENFORCED_KEYS)
            if unenforced:
                log.warning("client quota %s for %s is stored but not enforced by Kompakt",
                            ", ".join(unenforced), E.describe_entity(entity))
        log.info("client quotas altered: %s", "; ".join(f"{E.describe_entity(e)} -> {v or 'none'}"
                                                       for e, v in changes.items()))
        return results

    def _prepare(self, entries: list) -> tuple[list[tuple[int, str | None]], dict[tuple, dict[str, float]]]:
        seen: dict[tuple, int] = {}
        results: list[tuple[int, str | None]] = []
        changes: dict[tuple, dict[str, float]] = {}
        for i, (pairs, ops) in enumerate(entries):
            entity = E.entity_key(pairs)
            try:
                if entity in seen:
                    first = seen[entity]          # Kafka fails every copy of a duplicated entity
                    message = f"Ignoring duplicate entity {E.describe_entity(entity)}"
                    results[first] = (ErrorCode.INVALID_REQUEST, message)
                    changes.pop(entity, None)
                    raise E.QuotaError(ErrorCode.INVALID_REQUEST, message)
                seen[entity] = i
                changes[entity] = self._altered(pairs, entity, ops)
            except E.QuotaError as exc:
                results.append((exc.code, exc.message))
                continue
            results.append((ErrorCode.NONE, None))
        return results, changes

    def _altered(self, pairs, entity: tuple, ops) -> dict[str, float]:
        as_dict = E.validate_entity(pairs)
        keys = E.keys_for(as_dict)
        new = dict(self.entities.get(entity, {}))
        named = set()
        for key, value, remove in ops:
            if key in named:
                raise E.QuotaError(ErrorCode.INVALID_REQUEST, f"Duplicate quota key {key} not updating quota "
                                                              f"for this entity {E.describe_entity(entity)}")
            named.add(key)
            if remove:
                new.pop(key, None)
            else:
                E.validate_value(keys, key, value)
                new[key] = float(value)
        return new


def _sort_key(item) -> tuple:
    entity = item[0]
    return tuple((t, "" if n is None else "\x01" + n) for t, n in entity)
