"""The watched cluster's topic configs: infra.topic_configs asks an AdminClient for every
topic's configs, evaluation.inputs keeps the compacted topics. A fake AdminClient
answers, one of its topics with an error."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from detectors.compaction_lag import CompactedTopicConfig
from infra.topic_configs import describe_topic_configs
from evaluation.inputs import describe_compacted_topics

pytestmark = pytest.mark.unit


class Failed:
    def result(self, timeout=None):
        raise RuntimeError("timed out")


class Described:
    def __init__(self, entries: dict):
        self.entries = entries

    def result(self, timeout=None):
        return {k: SimpleNamespace(value=v) for k, v in self.entries.items()}


class FakeAdmin:
    def __init__(self, topics: dict):
        self.topics = topics          # name -> {config: value}, or None for a failing topic
        self.described: list[str] = []

    def list_topics(self, timeout=None):
        return SimpleNamespace(topics={n: object() for n in self.topics})

    def describe_configs(self, resources, request_timeout=None):
        self.described += [r.name for r in resources]
        return {r: Failed() if self.topics[r.name] is None else Described(self.topics[r.name])
                for r in resources}


TOPICS = {
    "orders": {"cleanup.policy": "delete", "min.cleanable.dirty.ratio": "0.5"},
    "ledger": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
               "max.compaction.lag.ms": "3600000"},
    "accounts": {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.5",
                 "max.compaction.lag.ms": str(2 ** 63 - 1)},
    "broken": None,
}


def test_every_topic_that_answers_is_described_and_one_that_fails_is_logged(caplog):
    admin = FakeAdmin(TOPICS)
    with caplog.at_level(logging.WARNING, logger="infra.topic_configs"):
        configs = describe_topic_configs(admin, "c1")
    assert admin.described == sorted(TOPICS)
    assert configs == {n: e for n, e in TOPICS.items() if e is not None}
    assert [r.getMessage() for r in caplog.records] == [
        "describe_configs broken on c1: timed out"]


def test_the_compacted_topics_are_kept_in_topic_order():
    assert describe_compacted_topics(FakeAdmin(TOPICS), "c1") == [
        CompactedTopicConfig("c1", "accounts", 0.5, None),
        CompactedTopicConfig("c1", "ledger", 0.1, 3_600_000)]


def test_a_cluster_without_topics_is_not_asked_for_configs():
    admin = FakeAdmin({})
    assert describe_topic_configs(admin, "c1") == {}
    assert describe_compacted_topics(admin, "c1") == []
    assert admin.described == []
