"""The [remediation] configuration section: what the decision step and the executor may do.

Everything is off until switched on: `enabled_actions` is empty by default, so every action
type is disabled, and `dry_run` is true, so an enabled action is only logged until an
operator turns dry runs off. Keys, with defaults:

- enabled_actions = []: action kinds that may run (move_leadership, cancel_reassignment,
  restore_group_offsets, page_human).
- dry_run = true: the executor logs what it would do and records a dry_run result.
- cooldown_s = 1800: after an action on an entity (a broker, a group), none on the same
  entity for this long.
- max_actions_per_hour = 3: per cluster, over the last hour.
- max_cluster_share = 0.2: no action when the finding is cluster-wide, or when the brokers
  implicated at once are more than this share of the cluster's brokers (a fleet-wide
  signal is the monitor's problem, not the brokers').
- deadline_s = 600: an action not started this long after its decision is skipped (the
  cluster has moved on since).
- recheck_after_s = 300: a finding the guards held back is decided again this much later.
- topic = "kmon.remediation": the action queue on the monitoring Kafka.
- executor_group = "kmon-remediation-executor": the executors' consumer group.
- decisions_table = "remediation_decisions", results_table = "remediation_results": gold
  tables (Delta) of every decision and every action result.
- alertmanager_url = "": where page_human actions post their alert (Alertmanager API v2);
  empty: page_human is recorded as skipped, the finding's own alert rule still pages.
- action_timeout_s = 60: how long the executor waits for a leadership move or an offset
  change to show in the cluster's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import ConfigError, _key
from core.findings import ActionKind

# What the decision step can queue; ActionKind.NONE is the absence of an action.
QUEUED_KINDS = tuple(k for k in ActionKind if k is not ActionKind.NONE)


@dataclass(frozen=True)
class RemediationSection:
    enabled_actions: list = _key("Action kinds that may run: move_leadership, "
                                 "cancel_reassignment, restore_group_offsets, page_human; empty "
                                 "disables every action type", [])
    dry_run: bool = _key("Only log what an action would do (and record a dry_run result)", True)
    cooldown_s: float = _key("After an action on an entity (broker, group), no other action on "
                             "it for this long", 1800.0, min=0, max=30 * 86400)
    max_actions_per_hour: int = _key("Most actions started per cluster in any hour", 3,
                                     min=0, max=10000)
    max_cluster_share: float = _key("No action when the finding is cluster-wide or the brokers "
                                    "implicated at once exceed this share of the cluster", 0.2,
                                    min=0, max=1)
    deadline_s: float = _key("An action not started this long after its decision is skipped",
                             600.0, min=1, max=86400)
    recheck_after_s: float = _key("A finding held back by a guard is decided again this much "
                                  "later", 300.0, min=1, max=86400)
    topic: str = _key("Kafka topic of the action queue (on the monitoring Kafka)",
                      "kmon.remediation")
    executor_group: str = _key("Consumer group of the executors reading the queue",
                               "kmon-remediation-executor")
    decisions_table: str = _key("Gold Delta table of every decision", "remediation_decisions")
    results_table: str = _key("Gold Delta table of every action result", "remediation_results")
    alertmanager_url: str = _key("Alertmanager base URL page_human actions post to (API v2); "
                                 "empty: page_human actions are skipped (the finding's own "
                                 "alert rule still pages)", "")
    action_timeout_s: float = _key("How long the executor waits for a change to show in the "
                                   "cluster's metadata", 60.0, min=1, max=3600)

    def __post_init__(self) -> None:
        known = {k.value for k in QUEUED_KINDS}
        for name in self.enabled_actions:
            if name not in known:
                raise ConfigError(f"remediation.enabled_actions: unknown action kind {name!r} "
                                  f"(known: {', '.join(sorted(known))})")
        if not self.topic:
            raise ConfigError("remediation.topic must not be empty")

    def is_enabled(self, kind: ActionKind) -> bool:
        return kind.value in self.enabled_actions

    @property
    def cooldown_ms(self) -> int:
        return int(self.cooldown_s * 1000)

    @property
    def deadline_ms(self) -> int:
        return int(self.deadline_s * 1000)

    @property
    def recheck_after_ms(self) -> int:
        return int(self.recheck_after_s * 1000)
