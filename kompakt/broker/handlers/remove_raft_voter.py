"""RemoveRaftVoter (API key 81), version 0: asking the single-node quorum to drop a voter.

Behaviour (Kafka's KafkaRaftClient.handleRemoveVoterRequest and RemoveVoterHandler, which a
broker forwards RemoveRaftVoter to, after ControllerApis checks ALTER on the cluster), in Kafka's
order:
* a cluster id that is not this cluster's (null is accepted): INCONSISTENT_CLUSTER_ID;
* a voter id below 0: INVALID_REQUEST "Remove voter request didn't include a valid voter";
* else VOTER_NOT_FOUND "Cannot remove voter ... from the set of voters [...]": Kafka's
  VoterSet.removeVoter refuses a key that is not a voter (another id, or this node's id with
  another directory id) and the last voter, and this node is the only one.
Nothing changes. Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from kompakt.broker.handlers.describe_quorum import (replica_key_text, voter_change_answer,
                                                     voter_change_refused, voters_text)
from kompakt.protocol.errors import ErrorCode

API_KEY = 81
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request):
    refused = voter_change_refused(ctx, request)
    if refused is not None:
        return voter_change_answer(API_KEY, *refused)
    if request.voter_id < 0:
        return voter_change_answer(API_KEY, ErrorCode.INVALID_REQUEST, "Remove voter request didn't include a valid voter")
    voter = replica_key_text(request.voter_id, request.voter_directory_id)
    return voter_change_answer(API_KEY, ErrorCode.VOTER_NOT_FOUND,
                               f"Cannot remove voter {voter} from the set of voters {voters_text(ctx)}")
