"""AddRaftVoter (API key 80), version 0: asking the single-node quorum to take a second voter.

Behaviour (Kafka's KafkaRaftClient.handleAddVoterRequest and AddVoterHandler, which a broker
forwards AddRaftVoter to, after ControllerApis checks ALTER on the cluster): in Kafka's order,
* a cluster id that is not this cluster's (null is accepted): INCONSISTENT_CLUSTER_ID;
* a voter id below 0 or a zero directory id: INVALID_REQUEST "Add voter request didn't include a
  valid voter";
* no endpoint for the quorum's listener (Kompakt's first listener, the one DescribeQuorum lists
  first): INVALID_REQUEST;
* the voter id is already a voter (this node): DUPLICATE_VOTER;
* else the new voter would have to be an observer that has fetched the metadata log up to the
  leader's end before it joins (Kafka waits for that, then times out): no other node can
  replicate Kompakt's metadata, so the answer is REQUEST_TIMED_OUT, as Kafka's for a voter that is
  not ready to receive requests. Nothing changes.
Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

The quorum is a standalone one (kraft.version 1, as ApiVersions finalizes and DescribeQuorum
describes), so reconfiguration is "supported" and refused only for the reasons above.
"""
from __future__ import annotations

from kompakt.broker.handlers.describe_quorum import (replica_key_text, voter_change_answer,
                                                     voter_change_refused, voters_text)
from kompakt.protocol.errors import ErrorCode

API_KEY = 80
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request):
    refused = voter_change_refused(ctx, request)
    if refused is not None:
        return voter_change_answer(API_KEY, *refused)
    directory = request.voter_directory_id
    if request.voter_id < 0 or directory is None or directory.int == 0:
        return voter_change_answer(API_KEY, ErrorCode.INVALID_REQUEST, "Add voter request didn't include a valid voter")
    voter = replica_key_text(request.voter_id, directory)
    quorum_listener = ctx.broker.listeners[0].name
    if not any(listener.name == quorum_listener for listener in request.listeners or []):
        endpoints = ", ".join(f"{listener.name}=({listener.host}:{listener.port})" for listener in request.listeners or [])
        return voter_change_answer(API_KEY, ErrorCode.INVALID_REQUEST,
                                   f"Add voter request didn't include the endpoint (Endpoints(endpoints={{{endpoints}}})) "
                                   f"for the default listener ListenerName({quorum_listener})")
    if request.voter_id == ctx.broker.node_id:
        return voter_change_answer(API_KEY, ErrorCode.DUPLICATE_VOTER,
                                   f"The voter id for {voter} is already part of the set of voters {voters_text(ctx)}.")
    return voter_change_answer(API_KEY, ErrorCode.REQUEST_TIMED_OUT, f"New voter {voter} is not ready to receive requests")
