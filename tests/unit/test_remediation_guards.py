"""The remediation guards, one table of situations: each names the guard that must refuse
(or None) and whether the refusal only defers the action."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind
from remediation.config import RemediationSection
from remediation.guards import HOUR_MS, PastAction, cap_frees_ms, cooldown_ends_ms, first_refusal

NOW = 10 * HOUR_MS
MIN = 60_000
ALL_ON = ["move_leadership", "cancel_reassignment", "restore_group_offsets", "page_human"]


def past(target: str, minutes_ago: float, *, in_flight: bool = False, cluster: str = "c1",
         kind: ActionKind = ActionKind.MOVE_LEADERSHIP, action_id: str | None = None) -> PastAction:
    return PastAction(action_id or f"a-{target}-{minutes_ago}", cluster, target, kind,
                      int(NOW - minutes_ago * MIN), in_flight)


@dataclass(frozen=True)
class Case:
    name: str
    refused_by: str | None
    defer: bool | None = None
    kind: ActionKind = ActionKind.MOVE_LEADERSHIP
    target: str = "broker:3"
    history: tuple[PastAction, ...] = ()
    config: dict = field(default_factory=lambda: {"enabled_actions": ALL_ON})
    entity_kind: EntityKind | None = EntityKind.BROKER
    anomaly_type: AnomalyType | None = AnomalyType.SLOW_BROKER
    implicated: int | None = None
    cluster_size: int | None = None
    deadline_ms: int | None = None
    exclude: str | None = None


CASES = [
    Case("defaults_disable_every_action_type", "action_enabled", False, config={}),
    Case("page_human_disabled_by_default", "action_enabled", False,
         kind=ActionKind.PAGE_HUMAN, config={}),
    Case("only_the_listed_kind_is_enabled", "action_enabled", False,
         kind=ActionKind.RESTORE_GROUP_OFFSETS, config={"enabled_actions": ["move_leadership"]}),
    Case("enabled_and_nothing_else_happening", None),
    Case("finding_about_the_whole_cluster", "not_cluster_wide", False,
         entity_kind=EntityKind.CLUSTER),
    Case("cluster_wide_slowness_type", "not_cluster_wide", False,
         anomaly_type=AnomalyType.CLUSTER_WIDE_SLOWNESS),
    Case("one_slow_broker_of_three_is_a_third_of_the_fleet", "within_cluster_share", True,
         implicated=1, cluster_size=3),
    Case("one_slow_broker_of_ten", None, implicated=1, cluster_size=10),
    Case("two_of_ten_is_exactly_the_share", None, implicated=2, cluster_size=10),
    Case("three_of_ten_is_over_the_share", "within_cluster_share", True, implicated=3,
         cluster_size=10),
    Case("one_of_three_with_a_raised_share", None, implicated=1, cluster_size=3,
         config={"enabled_actions": ALL_ON, "max_cluster_share": 0.5}),
    Case("cluster_size_unknown_is_left_to_the_executor", None, implicated=5),
    Case("queued_action_past_its_deadline", "before_deadline", False, deadline_ms=NOW - 1),
    Case("queued_action_within_its_deadline", None, deadline_ms=NOW + 1),
    Case("another_action_in_flight_in_the_cluster", "nothing_in_flight", True,
         history=(past("broker:1", 1, in_flight=True),)),
    Case("an_action_in_flight_in_another_cluster", None,
         history=(past("broker:1", 1, in_flight=True, cluster="c2"),)),
    Case("its_own_running_record_does_not_block_a_resumed_action", None,
         history=(past("broker:3", 1, in_flight=True, action_id="me"),), exclude="me"),
    Case("same_broker_acted_on_10_minutes_ago", "cooled_down", True,
         history=(past("broker:3", 10),)),
    Case("same_broker_acted_on_31_minutes_ago", None, history=(past("broker:3", 31),)),
    Case("another_broker_acted_on_10_minutes_ago", None, history=(past("broker:1", 10),)),
    Case("cooldown_switched_off", None, history=(past("broker:3", 1),),
         config={"enabled_actions": ALL_ON, "cooldown_s": 0}),
    Case("three_actions_in_the_last_hour", "under_hourly_cap", True,
         history=(past("broker:1", 50), past("broker:2", 40), past("group:g", 35))),
    Case("three_actions_but_one_is_older_than_an_hour", None,
         history=(past("broker:1", 61), past("broker:2", 40), past("group:g", 35))),
    Case("three_actions_in_another_cluster", None,
         history=tuple(past(f"broker:{i}", 40, cluster="c2") for i in range(3))),
    Case("paging_is_not_held_back_by_an_action_in_flight", None, kind=ActionKind.PAGE_HUMAN,
         target="partition:t-0", history=(past("broker:1", 1, in_flight=True),)),
    Case("paging_is_not_held_back_by_the_hourly_cap", None, kind=ActionKind.PAGE_HUMAN,
         history=tuple(past(f"broker:{i}", 5) for i in range(3))),
    Case("paging_a_cluster_wide_finding_is_allowed", None, kind=ActionKind.PAGE_HUMAN,
         target="cluster:c1", entity_kind=EntityKind.CLUSTER,
         anomaly_type=AnomalyType.CLUSTER_WIDE_SLOWNESS, implicated=9, cluster_size=10),
    Case("disabled_wins_over_every_other_reason", "action_enabled", False, config={},
         entity_kind=EntityKind.CLUSTER, history=(past("broker:3", 1, in_flight=True),)),
    Case("cluster_wide_wins_over_a_deferral", "not_cluster_wide", False,
         entity_kind=EntityKind.CLUSTER, history=(past("broker:3", 1, in_flight=True),)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_guards(case: Case):
    config = RemediationSection(**case.config)
    refusal = first_refusal(kind=case.kind, cluster="c1", target=case.target,
                            history=list(case.history), config=config, now_ms=NOW,
                            entity_kind=case.entity_kind, anomaly_type=case.anomaly_type,
                            implicated=case.implicated, cluster_size=case.cluster_size,
                            deadline_ms=case.deadline_ms, exclude=case.exclude)
    if case.refused_by is None:
        assert refusal is None, refusal
    else:
        assert refusal is not None, f"expected {case.refused_by} to refuse"
        assert refusal.guard == case.refused_by, refusal
        assert refusal.defer is case.defer
        assert not refusal.verdict.allowed and refusal.verdict.reason


def test_refusal_reasons_name_the_config_key():
    config = RemediationSection(enabled_actions=ALL_ON)
    share = first_refusal(kind=ActionKind.MOVE_LEADERSHIP, cluster="c1", target="broker:3",
                          history=[], config=config, now_ms=NOW, implicated=1, cluster_size=3)
    assert "max_cluster_share" in share.verdict.reason and "1 of 3" in share.verdict.reason
    off = first_refusal(kind=ActionKind.MOVE_LEADERSHIP, cluster="c1", target="broker:3",
                        history=[], config=RemediationSection(), now_ms=NOW)
    assert "remediation.enabled_actions" in off.verdict.reason


def test_cooldown_ends_at_the_last_action_plus_the_cooldown():
    config = RemediationSection(cooldown_s=1800)
    history = [past("broker:3", 25), past("broker:3", 10), past("broker:1", 1)]
    assert cooldown_ends_ms("c1", "broker:3", history, config) == NOW - 10 * MIN + 1800_000
    assert cooldown_ends_ms("c1", "broker:9", history, config) is None


def test_cap_frees_when_the_oldest_action_leaves_the_hour():
    config = RemediationSection(max_actions_per_hour=2)
    history = [past("a", 50), past("b", 40), past("c", 30)]
    # three in the hour, cap two: one more fits once two of them have left the window
    assert cap_frees_ms("c1", history, config, NOW) == NOW - 40 * MIN + HOUR_MS
    assert cap_frees_ms("c1", history[:1], config, NOW) is None
