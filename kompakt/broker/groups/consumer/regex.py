"""Regular-expression subscriptions of consumer-protocol groups (KIP-848 `subscribed_topic_regex`).

Role: validate a member's regex and resolve the group's regexes against the topic names. Kafka
compiles them with RE2/J (linear-time matching, no backtracking features) and a topic matches
when the whole name matches. Python's `re` over RE2's subset gives the same answers, so we
compile with `re` and refuse the constructs RE2 lacks (look-around, back-references, atomic
groups, conditionals, possessive quantifiers) with INVALID_REGULAR_EXPRESSION naming the
construct, rather than match differently from Kafka. Internal topics (`__consumer_offsets`,
`__transaction_state`) are never matched.

Refresh rule (Kafka's maybeUpdateRegularExpressions): regexes are re-resolved during a heartbeat
when the group has some and the last resolution is older than REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
and either a regex is not resolved yet, the topics changed since, or the last resolution is older
than REGEX_REFRESH_MAX_INTERVAL_MS. Kafka resolves in a background executor and writes the result
as a later batch; here the resolution is a scan of the topic names done on the spot, and its
records go out with the heartbeat's own.
"""
from __future__ import annotations

import re

from kompakt.protocol import errors

REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000
REGEX_REFRESH_MAX_INTERVAL_MS = 600_000     # Kafka's group.consumer.regex.refresh.interval.ms
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

# (pattern that finds the construct, what to call it in the error)
_NOT_RE2 = [
    (re.compile(r"\(\?<?[=!]"), "look-around assertions"),
    (re.compile(r"\\[1-9]|\(\?P="), "back-references"),
    (re.compile(r"\(\?>"), "atomic groups"),
    (re.compile(r"\(\?\("), "conditionals"),
    (re.compile(r"[*+?}]\+"), "possessive quantifiers"),
]

_cache: dict[str, re.Pattern] = {}


def compile_regex(regex: str) -> re.Pattern:
    """The compiled regex, or INVALID_REGULAR_EXPRESSION saying why (Kafka's message shape)."""
    pattern = _cache.get(regex)
    if pattern is not None:
        return pattern
    for finder, what in _NOT_RE2:
        if finder.search(regex):
            raise errors.InvalidRegularExpressionError(
                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {what} are not "
                f"supported (RE2 syntax).")
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise errors.InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None
    if len(_cache) > 1024:
        _cache.clear()
    _cache[regex] = pattern
    return pattern


def resolve(regexes, topic_names) -> dict[str, frozenset]:
    """regex -> the topic names it matches in full (invalid ones match nothing)."""
    out: dict[str, frozenset] = {}
    names = [t for t in topic_names if t not in INTERNAL_TOPICS]
    for regex in regexes:
        try:
            pattern = compile_regex(regex)
        except errors.KafkaError:
            out[regex] = frozenset()
            continue
        out[regex] = frozenset(t for t in names if pattern.fullmatch(t))
    return out
