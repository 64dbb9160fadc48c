"""UpdateFeatures (API key 57), versions 0-2: changing the cluster's finalized feature levels.

Behaviour (Kafka 4.0: a broker forwards UpdateFeatures to the active controller; ControllerApis
checks ALTER on the cluster, then QuorumController.updateFeatures): the rules, each refusal's
text and the levels Kompakt can finalize are in broker/features/update.py; the levels, their
epoch and their file in broker/features/levels.py. In short: an update is accepted when its level
is within what this node supports (ApiVersions' SupportedFeatures) and its upgrade type matches
its direction; metadata.version may go down only where no metadata changed (25 -> 23-24);
kraft.version never goes down; eligible.leader.replicas.version stays 0 (a single node has no
eligible leaders); transaction.version moves within 0-2; group.version 0 turns KIP-848 groups off. The
first refused update refuses the whole request: top-level INVALID_UPDATE_VERSION with Kafka's
"The update failed for all features since the following feature had an error: ..." and no
per-feature results, nothing changed. An accepted request is saved (one crash-safe file write)
before the answer; ApiVersions then lists the new levels under an epoch one higher.

Answer shapes (Kafka's): success = top-level error 0 and message null; at v0-1 one result per
requested feature, error 0 with message "NONE" (Kafka's Errors.NONE.message()); v2 has no
results. A failure = top-level code and message, no results, at every version.
Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED ("Cluster authorization
failed.") and no results.

Version notes: flexible from v0. v0 carries AllowDowngrade, which Kafka 4.0's controller does not
read (it reads UpgradeType, whose default is UPGRADE, so a v0 downgrade is refused); v1 adds
UpgradeType and ValidateOnly (every check, nothing changed, the same answer); v2 drops the
per-feature results. timeoutMs is accepted and not needed: the change is made before answering.
"""
from __future__ import annotations

from kafka.protocol.admin.cluster import UpdateFeaturesResponse

from kompakt.broker.features.update import UPGRADE, Update, decide
from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2

CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."
NONE_MESSAGE = "NONE"          # Kafka's Errors.NONE.message(): the constant's name

_Result = UpdateFeaturesResponse.UpdatableFeatureResult


def _answer(version: int, code: int = 0, message: str | None = None, results=None) -> UpdateFeaturesResponse:
    fields = dict(version=version, throttle_time_ms=0, error_code=int(code), error_message=message)
    if version <= 1:
        fields["results"] = results or []
    return UpdateFeaturesResponse(**fields)


async def handle(ctx, request) -> UpdateFeaturesResponse:
    v = ctx.api_version
    if not ctx.authorize_cluster(Op.ALTER):
        return _answer(v, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE)
    updates = [Update(u.feature, u.max_version_level, u.upgrade_type if v >= 1 else UPGRADE)
               for u in request.feature_updates or []]
    validate_only = bool(request.validate_only) if v >= 1 else False
    node_id = ctx.broker.node_id
    refusal = await ctx.broker.features.update(lambda levels: decide(levels, updates, node_id), validate_only)
    if refusal is not None:
        return _answer(v, ErrorCode.INVALID_UPDATE_VERSION, refusal)
    return _answer(v, results=[_Result(feature=u.feature, error_code=0, error_message=NONE_MESSAGE)
                               for u in updates])
