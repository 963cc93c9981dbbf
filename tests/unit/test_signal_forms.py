"""core/signals.py and its SQL forms (core/signals_sql.py): on the same named rows, DuckDB
gives what the Python definitions give, and both give what the rule says; config
spellings of an API become its request-log name once, at load, or a ConfigError naming
the key."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from core import signals
from core.config_keys import ConfigError
from core.kafka_apis import API_NAMES
from core.signals import canonical_api, judged_ms, threshold_for
from core.signals_sql import in_purgatory_sql, judged_sql, threshold_case_sql
from detectors.slow_broker import SlowBrokerSection
from infra.lake import Lake
from infra.lake_sql import LakeSql

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True)
class Request:
    name: str
    api: str
    total: float
    remote: float | None
    judged: float               # under PURGATORY_APIS
    judged_custom: float        # under CUSTOM


# Produce's Remote (acks=all) left out, Fetch judged on its total, SyncGroup as before.
CUSTOM = frozenset({"Produce", "SyncGroup"})

REQUESTS = [
    Request("fetch waits out fetch.max.wait.ms", "Fetch", 520.0, 500.0, 20.0, 520.0),
    Request("join group waits for the rebalance", "JoinGroup", 3000.0, 2990.0, 10.0, 3000.0),
    Request("sync group waits for the leader", "SyncGroup", 1000.0, 990.0, 10.0, 10.0),
    Request("fractional ms", "Fetch", 500.7, 499.9, 500.7 - 499.9, 500.7),
    Request("remote above total", "Fetch", 100.0, 120.0, 0.0, 100.0),
    Request("remote equal to total", "JoinGroup", 80.0, 80.0, 0.0, 80.0),
    Request("null remote", "Fetch", 40.0, None, 40.0, 40.0),
    Request("produce acks=all waits in remote", "Produce", 600.0, 588.0, 600.0, 12.0),
    Request("produce, remote above total", "Produce", 5.0, 9.0, 5.0, 0.0),
    Request("produce, null remote", "Produce", 7.0, None, 7.0, 7.0),
    Request("fetchsnapshot is not fetch", "FetchSnapshot", 700.0, 690.0, 700.0, 700.0),
    Request("names compare exactly", "FETCH", 515.0, 500.0, 515.0, 515.0),
]


def _sql_rows(select: str, rows: list[dict]) -> dict[str, float]:
    sql = LakeSql(Lake("/nonexistent"))
    try:
        got = sql.rows(f"SELECT name, {select} AS v FROM t", t=pa.Table.from_pylist(rows))
    finally:
        sql.close()
    return {r["name"]: r["v"] for r in got}


def _judged_both_ways() -> tuple[list[float], list[float]]:
    rows = [{"name": r.name, "api": r.api, "total_ms": r.total, "remote_ms": r.remote}
            for r in REQUESTS]
    in_sql = _sql_rows(judged_sql("total_ms", "remote_ms", "api"), rows)
    return ([in_sql.get(r.name) for r in REQUESTS],
            [judged_ms(r.api, r.total, r.remote) for r in REQUESTS])


def test_the_requests_are_named_once_and_cover_every_purgatory_api():
    assert len({r.name for r in REQUESTS}) == len(REQUESTS)
    assert {r.api for r in REQUESTS} >= signals.PURGATORY_APIS | CUSTOM


def test_judged_sql_equals_judged_ms_and_the_rule():
    in_sql, in_python = _judged_both_ways()
    assert in_sql == in_python
    assert in_python == [r.judged for r in REQUESTS]


def test_both_forms_follow_the_one_constant(monkeypatch):
    monkeypatch.setattr(signals, "PURGATORY_APIS", CUSTOM)
    in_sql, in_python = _judged_both_ways()
    assert in_sql == in_python
    assert in_python == [r.judged_custom for r in REQUESTS]


def test_purgatory_sql_names_the_canonical_apis():
    assert in_purgatory_sql("api") == "api IN ('Fetch', 'JoinGroup', 'SyncGroup')"
    assert signals.PURGATORY_APIS <= set(API_NAMES.values())


@pytest.mark.parametrize("per_api,expected", [
    ({}, {"Fetch": 300.0, "Metadata": 300.0, "METADATA": 300.0, "Produce": 300.0}),
    ({"Metadata": 1000, "Fetch": 50.5},
     {"Fetch": 50.5, "Metadata": 1000.0, "METADATA": 300.0, "Produce": 300.0}),
], ids=["default only", "per api"])
def test_threshold_sql_equals_threshold_for(per_api, expected):
    rows = [{"name": api, "api": api} for api in expected]
    in_sql = _sql_rows(threshold_case_sql(300, per_api, "api"), rows)
    in_python = {api: threshold_for(api, 300, per_api) for api in expected}
    assert in_sql == in_python == expected


@pytest.mark.parametrize("spelling,name", [
    ("Produce", "Produce"), ("PRODUCE", "Produce"), ("Fetch", "Fetch"), ("fetch", "Fetch"),
    ("FetchConsumer", "Fetch"), ("FETCH_CONSUMER", "Fetch"), ("fetchconsumer", "Fetch"),
    ("FetchFollower", "Fetch"), ("fetch_follower", "Fetch"),
    ("FetchSnapshot", "FetchSnapshot"), ("API_VERSIONS", "ApiVersions"),
    ("offset_for_leader_epoch", "OffsetForLeaderEpoch"), ("TxnOffsetCommit", "TxnOffsetCommit"),
])
def test_canonical_api_maps_a_spelling_to_the_request_log_name(spelling, name):
    assert canonical_api(spelling, "some.key") == name


def test_every_request_log_name_is_its_own_canonical_name():
    assert all(canonical_api(n, "k") == n for n in API_NAMES.values())


@pytest.mark.parametrize("name", ["Fetchh", "FetchConsumers", "", "Fetch:consumer"])
def test_an_unknown_api_is_a_config_error_naming_the_key(name):
    with pytest.raises(ConfigError, match=r"some\.key"):
        canonical_api(name, "some.key")


def test_slow_broker_config_is_canonical_once_read():
    c = SlowBrokerSection(watched_apis=["FETCH_CONSUMER", "Produce", "fetch", "FetchFollower",
                                        "metadata"],
                          api_threshold_ms={"metadata": 1000, "FetchConsumer": 50,
                                            "Fetch": 70})
    assert c.watched_apis == ["Fetch", "Produce", "Metadata"]     # order kept, once each
    assert c.api_threshold_ms == {"Metadata": 1000, "Fetch": 50}  # the first spelling wins
    assert dataclasses.replace(c, api_threshold_ms={"OFFSET_COMMIT": 9}).api_threshold_ms == {
        "OffsetCommit": 9}
    assert all(a in API_NAMES.values() for a in SlowBrokerSection().watched_apis)


@pytest.mark.parametrize("kwargs,key", [
    ({"watched_apis": ["Produce", "Fecth"]}, "slow_broker.watched_apis"),
    ({"api_threshold_ms": {"Metdata": 1000}}, "slow_broker.api_threshold_ms"),
], ids=["watched_apis", "api_threshold_ms"])
def test_an_unknown_api_in_slow_broker_is_a_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as e:
        SlowBrokerSection(**kwargs)
    assert "Fecth" in str(e.value) or "Metdata" in str(e.value)
