"""ingest/kafka_api.py: the API key table and the mapping to JMX request names."""

from __future__ import annotations

import pytest

from ingest.kafka_api import API_NAMES, ApiMismatch, camel, canonical_api, upper_snake

pytestmark = pytest.mark.unit

# The constants of org.apache.kafka.common.protocol.ApiKeys in kafka-clients 4.3.1, in id
# order (printed from the jar with ApiKeys.values(); the same list as apache/kafka's ApiKeys.java).
APIKEYS_ENUM_4_3_1 = """
PRODUCE FETCH LIST_OFFSETS METADATA LEADER_AND_ISR STOP_REPLICA UPDATE_METADATA
CONTROLLED_SHUTDOWN OFFSET_COMMIT OFFSET_FETCH FIND_COORDINATOR JOIN_GROUP HEARTBEAT
LEAVE_GROUP SYNC_GROUP DESCRIBE_GROUPS LIST_GROUPS SASL_HANDSHAKE API_VERSIONS CREATE_TOPICS
DELETE_TOPICS DELETE_RECORDS INIT_PRODUCER_ID OFFSET_FOR_LEADER_EPOCH ADD_PARTITIONS_TO_TXN
ADD_OFFSETS_TO_TXN END_TXN WRITE_TXN_MARKERS TXN_OFFSET_COMMIT DESCRIBE_ACLS CREATE_ACLS
DELETE_ACLS DESCRIBE_CONFIGS ALTER_CONFIGS ALTER_REPLICA_LOG_DIRS DESCRIBE_LOG_DIRS
SASL_AUTHENTICATE CREATE_PARTITIONS CREATE_DELEGATION_TOKEN RENEW_DELEGATION_TOKEN
EXPIRE_DELEGATION_TOKEN DESCRIBE_DELEGATION_TOKEN DELETE_GROUPS ELECT_LEADERS
INCREMENTAL_ALTER_CONFIGS ALTER_PARTITION_REASSIGNMENTS LIST_PARTITION_REASSIGNMENTS
OFFSET_DELETE DESCRIBE_CLIENT_QUOTAS ALTER_CLIENT_QUOTAS DESCRIBE_USER_SCRAM_CREDENTIALS
ALTER_USER_SCRAM_CREDENTIALS VOTE BEGIN_QUORUM_EPOCH END_QUORUM_EPOCH DESCRIBE_QUORUM
ALTER_PARTITION UPDATE_FEATURES ENVELOPE FETCH_SNAPSHOT DESCRIBE_CLUSTER DESCRIBE_PRODUCERS
BROKER_REGISTRATION BROKER_HEARTBEAT UNREGISTER_BROKER DESCRIBE_TRANSACTIONS LIST_TRANSACTIONS
ALLOCATE_PRODUCER_IDS CONSUMER_GROUP_HEARTBEAT CONSUMER_GROUP_DESCRIBE CONTROLLER_REGISTRATION
GET_TELEMETRY_SUBSCRIPTIONS PUSH_TELEMETRY ASSIGN_REPLICAS_TO_DIRS LIST_CONFIG_RESOURCES
DESCRIBE_TOPIC_PARTITIONS SHARE_GROUP_HEARTBEAT SHARE_GROUP_DESCRIBE SHARE_FETCH
SHARE_ACKNOWLEDGE ADD_RAFT_VOTER REMOVE_RAFT_VOTER UPDATE_RAFT_VOTER
INITIALIZE_SHARE_GROUP_STATE READ_SHARE_GROUP_STATE WRITE_SHARE_GROUP_STATE
DELETE_SHARE_GROUP_STATE READ_SHARE_GROUP_STATE_SUMMARY STREAMS_GROUP_HEARTBEAT
STREAMS_GROUP_DESCRIBE DESCRIBE_SHARE_GROUP_OFFSETS ALTER_SHARE_GROUP_OFFSETS
DELETE_SHARE_GROUP_OFFSETS
""".split()


def test_the_table_holds_every_key_of_kafka_4_3_1_under_its_enum_constant():
    assert sorted(API_NAMES) == list(range(len(APIKEYS_ENUM_4_3_1)))
    assert [upper_snake(API_NAMES[k]) for k in sorted(API_NAMES)] == APIKEYS_ENUM_4_3_1


def test_jmx_name_and_enum_constant_convert_both_ways():
    for name in API_NAMES.values():
        assert camel(upper_snake(name)) == name


CASES = [
    ("key_and_name", 0, "PRODUCE", (0, "Produce")),
    ("key_only", 18, None, (18, "ApiVersions")),
    ("name_only", None, "OFFSET_FOR_LEADER_EPOCH", (23, "OffsetForLeaderEpoch")),
    ("newer_api_than_the_table", 93, "FUTURE_THING", (93, "FutureThing")),
    ("unknown_key_without_name", 999, None, None),
    ("nothing_given", None, None, None),
    ("name_not_an_enum_constant", 999, "no such api", None),
    ("negative_key_with_new_name", -1, "FUTURE_THING", None),
]


@pytest.mark.parametrize("key,name,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_canonical_api(key, name, expected):
    assert canonical_api(key, name) == expected


@pytest.mark.parametrize("key,name", [(0, "FETCH"), (1000, "PRODUCE")],
                         ids=["known_key_other_name", "known_name_other_key"])
def test_key_and_name_that_disagree_raise(key, name):
    with pytest.raises(ApiMismatch):
        canonical_api(key, name)
