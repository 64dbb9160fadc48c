"""Kafka error codes and the exceptions that carry them to the wire.

Role: every layer below the handlers (storage, cleaner, groups) raises a `KafkaError` subclass;
a handler catches it and writes `exc.code` into the partition (or top-level) error field. The
numeric values are Kafka's protocol constants (clients switch on them), so they never change.

Invariant: one class per code we raise, found by code with `error_for_code(code)`.
"""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128


class KafkaError(Exception):
    """An error with a Kafka error code; `str(exc)` is the message for the wire's error_message."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    # Produce v8+ record_errors: [(index of the record in its batch, message)] (Kafka's RecordError)
    record_errors: list = []

    def __init__(self, message: str | None = None):
        super().__init__(message or self.code.name)
        self.message = message


_BY_CODE: dict[int, type[KafkaError]] = {}


def _define(code: ErrorCode) -> type[KafkaError]:
    name = "".join(part.capitalize() for part in code.name.split("_")) + "Error"
    cls = type(name, (KafkaError,), {"code": code, "__module__": __name__})
    _BY_CODE[int(code)] = cls
    return cls


for _code in ErrorCode:
    if _code is not ErrorCode.NONE:
        _cls = _define(_code)
        globals()[_cls.__name__] = _cls
del _code, _cls


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a wire code (UNKNOWN_SERVER_ERROR for codes we do not know)."""
    return _BY_CODE.get(int(code), _BY_CODE[-1])


# Names used across the code base, spelled out so imports are greppable and checked by linters.
UnknownServerErrorError = _BY_CODE[-1]
OffsetOutOfRangeError = _BY_CODE[1]
CorruptMessageError = _BY_CODE[2]
UnknownTopicOrPartitionError = _BY_CODE[3]
NotLeaderOrFollowerError = _BY_CODE[6]
MessageTooLargeError = _BY_CODE[10]
CoordinatorLoadInProgressError = _BY_CODE[14]
CoordinatorNotAvailableError = _BY_CODE[15]
NotCoordinatorError = _BY_CODE[16]
InvalidTopicExceptionError = _BY_CODE[17]
RecordListTooLargeError = _BY_CODE[18]
InvalidRequiredAcksError = _BY_CODE[21]
IllegalGenerationError = _BY_CODE[22]
InconsistentGroupProtocolError = _BY_CODE[23]
InvalidGroupIdError = _BY_CODE[24]
UnknownMemberIdError = _BY_CODE[25]
InvalidSessionTimeoutError = _BY_CODE[26]
RebalanceInProgressError = _BY_CODE[27]
InvalidTimestampError = _BY_CODE[32]
UnsupportedVersionError = _BY_CODE[35]
TopicAlreadyExistsError = _BY_CODE[36]
InvalidPartitionsError = _BY_CODE[37]
InvalidReplicationFactorError = _BY_CODE[38]
InvalidConfigError = _BY_CODE[40]
InvalidRequestError = _BY_CODE[42]
UnsupportedForMessageFormatError = _BY_CODE[43]
PolicyViolationError = _BY_CODE[44]
OutOfOrderSequenceNumberError = _BY_CODE[45]
DuplicateSequenceNumberError = _BY_CODE[46]
InvalidProducerEpochError = _BY_CODE[47]
InvalidTxnStateError = _BY_CODE[48]
InvalidProducerIdMappingError = _BY_CODE[49]
InvalidTransactionTimeoutError = _BY_CODE[50]
ConcurrentTransactionsError = _BY_CODE[51]
TransactionCoordinatorFencedError = _BY_CODE[52]
KafkaStorageErrorError = _BY_CODE[56]
LogDirNotFoundError = _BY_CODE[57]
UnknownProducerIdError = _BY_CODE[59]
NonEmptyGroupError = _BY_CODE[68]
GroupIdNotFoundError = _BY_CODE[69]
MemberIdRequiredError = _BY_CODE[79]
FencedInstanceIdError = _BY_CODE[82]
GroupSubscribedToTopicError = _BY_CODE[86]
InvalidRecordError = _BY_CODE[87]
ProducerFencedError = _BY_CODE[90]
UnknownTopicIdError = _BY_CODE[100]
