"""The detector's results: causes and roles, every rule's result for a broker/API, whose
fault a suspect row is, one verdict per broker, and one assessment per window."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

from core.findings import ActionKind, Severity
from detectors.slow_broker.inputs import RequestStageWindow


class SlowBrokerCause(StrEnum):
    """The `cause` of this detector's findings (alerts and runbooks key on these)."""
    # The broker itself (move_leadership helps):
    REQUEST_HANDLERS_SATURATED = "request_handlers_saturated"
    LOCAL_DISK_OR_PAGE_CACHE = "local_disk_or_page_cache"
    NETWORK_THREADS_SATURATED = "network_threads_saturated"
    LEADER_REPLICATION_STALLED = "leader_replication_stalled"
    # The broker as a follower of other leaders:
    SLOW_FOLLOWER = "slow_follower"
    # A leader held back by a follower named in the evidence:
    REMOTE_PRODUCE_SLOW_FOLLOWER = "remote_produce_slow_follower"
    # Slow, fault not attributable:
    REMOTE_PRODUCE_UNKNOWN_FOLLOWER = "remote_produce_unknown_follower"
    REMOTE_WAIT = "remote_wait"
    RESPONSE_SEND_SLOW = "response_send_slow"
    NETWORK_SEND_SLOW = "network_send_slow"
    SLOW_UNATTRIBUTED = "slow_unattributed"
    # Not a broker fault:
    CLIENT_SLOW_READ = "client_slow_read"
    CLIENT_SLOW_LINK = "client_slow_link"
    QUOTA_THROTTLED = "quota_throttled"
    # Too many brokers at once:
    CLUSTER_WIDE_SLOWNESS = "cluster_wide_slowness"


class Role(StrEnum):
    # Declared in the order a broker's verdict is chosen when it has several in a window.
    CULPRIT = "culprit"            # the broker itself is slow (or is the slow follower)
    UNATTRIBUTED = "unattributed"  # slow, and we cannot tell whose fault it is
    VICTIM = "victim"              # slow because a follower holds it back
    QUOTA = "quota"                # slow because clients are throttled
    CLIENT = "client"              # slow because a few clients read slowly: no finding


ROLE_ORDER = list(Role)
BLAMED_ROLES = (Role.CULPRIT, Role.UNATTRIBUTED)


@dataclass(frozen=True)
class ApiVerdict:
    """Every rule's result for one broker/API/window (kept for tests and evidence)."""
    row: RequestStageWindow
    latency_ms: float
    threshold_ms: float
    enough_traffic: bool
    over_threshold: bool
    baseline_ms: float | None
    slow_vs_history: bool
    peer_median_ms: float | None
    slow_vs_peers: bool
    dominant_stage: str | None
    stage_share: float
    # Windows judged together (rules.pool_quiet), their requests; `latency_ms` is then
    # the least TP99 of the pool.
    pooled_windows: int = 1
    pooled_requests: int | None = None
    # Rules 2b and 4b (blame.corroborated_by_follower): the pool a row too quiet for
    # rule 2 may be judged on, and whether the follower it waits on is late elsewhere.
    follower_corroborated: bool = False
    quiet_pool: tuple[int, int, float] | None = None
    # Rule 6b (stalls.py): held in its own stages at instants the other brokers were too.
    shared_stall: bool = False

    @property
    def suspect(self) -> bool:
        return self.enough_traffic and self.over_threshold and not self.shared_stall and (
            self.slow_vs_history or self.slow_vs_peers or self.follower_corroborated)


@dataclass(frozen=True)
class Attribution:
    role: Role
    cause: str
    blamed_broker: int | None
    action: ActionKind
    severity: Severity
    why: str
    details: Mapping = field(default_factory=dict)


@dataclass
class BrokerVerdict:
    broker: int
    attribution: Attribution
    api_verdict: ApiVerdict | None         # None for a follower blamed only by its leaders
    slow_apis: list[str] = field(default_factory=list)
    held_back_leaders: list[int] = field(default_factory=list)
    victim_latency_ms: float = 0.0         # the worst Produce latency it caused on a leader
    # its other suspect rows' verdicts in the window (persistence weighs every one)
    others: list["BrokerVerdict"] = field(default_factory=list)


@dataclass
class WindowAssessment:
    cluster: str
    window_start_ms: int
    api_verdicts: list[ApiVerdict]
    brokers: dict[int, BrokerVerdict]
    brokers_with_traffic: set[int]
    blamed: set[int]
    cluster_wide: bool
    excused: dict[int, BrokerVerdict] = field(default_factory=dict)  # by a disruption
    quiet_slow: set[int] = field(default_factory=set)  # blame.quiet_but_slow
    shared_stall: set[int] = field(default_factory=set)  # stalls.py: slow, shared
