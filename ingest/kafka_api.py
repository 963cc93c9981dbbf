"""Every Kafka protocol API key, with the name JMX gives it.

The names are those of ``org.apache.kafka.common.protocol.ApiKeys`` in apache/kafka
(``ApiKeys.name``, the message type name without "Request"), which is what
``kafka.network:type=RequestMetrics,request=<name>`` uses: "Produce", "Fetch",
"ApiVersions". Checked against the ApiKeys enum of kafka-clients 4.3.1 (keys 0..92).
Keys no longer served (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown in
4.x) stay: their ids are never reused, and older brokers still log them.

The request log names an API in upper snake case (``requestApiKeyName`` "API_VERSIONS",
the enum constant); `canonical_api` maps either form to the JMX name.
"""

from __future__ import annotations

import re

API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr",
    5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 52: "Vote", 53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch", 55: "DescribeQuorum", 56: "AlterPartition", 57: "UpdateFeatures",
    58: "Envelope", 59: "FetchSnapshot", 60: "DescribeCluster", 61: "DescribeProducers",
    62: "BrokerRegistration", 63: "BrokerHeartbeat", 64: "UnregisterBroker",
    65: "DescribeTransactions", 66: "ListTransactions", 67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 73: "AssignReplicasToDirs",
    74: "ListConfigResources", 75: "DescribeTopicPartitions", 76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge", 80: "AddRaftVoter",
    81: "RemoveRaftVoter", 82: "UpdateRaftVoter", 83: "InitializeShareGroupState",
    84: "ReadShareGroupState", 85: "WriteShareGroupState", 86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary", 88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}

PRODUCE = 0
FETCH = 1

_UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
_CAMEL_WORD = re.compile(r"[A-Z][a-z0-9]*")


def upper_snake(name: str) -> str:
    """"ApiVersions" -> "API_VERSIONS", the form of the enum constant."""
    return "_".join(w.upper() for w in _CAMEL_WORD.findall(name))


def camel(key_name: str) -> str:
    """"API_VERSIONS" -> "ApiVersions"."""
    return "".join(w.capitalize() for w in key_name.split("_"))


API_KEYS_BY_UPPER: dict[str, int] = {upper_snake(n): k for k, n in API_NAMES.items()}


class ApiMismatch(ValueError):
    """The numeric key and the name in one header disagree."""


def canonical_api(api_key: int | None, key_name: str | None) -> tuple[int, str] | None:
    """(api key, JMX name) from a header's numeric key and/or its upper-snake name.

    A key from the table wins; a name alone is looked up. An API newer than the table
    (a well-formed name with an unknown key) is named from its enum constant, so a newer
    broker's requests are kept rather than quarantined. None when neither tells which API;
    `ApiMismatch` when the key and the name name different APIs.
    """
    if api_key is not None and api_key in API_NAMES:
        name = API_NAMES[api_key]
        if key_name is not None and key_name != upper_snake(name):
            raise ApiMismatch(f"{api_key} is {name}, not {key_name}")
        return api_key, name
    if key_name is None or not _UPPER_SNAKE.fullmatch(key_name):
        return None
    known = API_KEYS_BY_UPPER.get(key_name)
    if known is not None:
        if api_key is not None and api_key != known:
            raise ApiMismatch(f"{key_name} is {known}, not {api_key}")
        return known, API_NAMES[known]
    if api_key is None or api_key < 0:
        return None
    return api_key, camel(key_name)
