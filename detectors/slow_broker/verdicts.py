"""The detector's results: causes and roles, the rules' results per broker/API, a verdict
per broker and an assessment per window."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

from core.findings import ActionKind, Severity
from detectors.slow_broker.inputs import RequestStageWindow


class SlowBrokerCause(StrEnum):
    """The `cause` of this detector's findings (alerts and runbooks key on these)."""
    REQUEST_HANDLERS_SATURATED = "request_handlers_saturated"
    LOCAL_DISK_OR_PAGE_CACHE = "local_disk_or_page_cache"
    NETWORK_THREADS_SATURATED = "network_threads_saturated"
    LEADER_REPLICATION_STALLED = "leader_replication_stalled"
    SLOW_FOLLOWER = "slow_follower"
    REMOTE_PRODUCE_SLOW_FOLLOWER = "remote_produce_slow_follower"
    REMOTE_PRODUCE_UNKNOWN_FOLLOWER = "remote_produce_unknown_follower"
    REMOTE_WAIT = "remote_wait"
    RESPONSE_SEND_SLOW = "response_send_slow"
    NETWORK_SEND_SLOW = "network_send_slow"
    SLOW_UNATTRIBUTED = "slow_unattributed"
    CLIENT_SLOW_READ = "client_slow_read"
    CLIENT_SLOW_LINK = "client_slow_link"
    QUOTA_THROTTLED = "quota_throttled"
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
C, A, S = SlowBrokerCause, ActionKind, Severity
# Per cause: the role of the broker it names, the action, the severity and why (completed
# where the verdict is made when empty).
MEANING: Mapping[str, tuple[Role, ActionKind, Severity, str]] = {
    C.REQUEST_HANDLERS_SATURATED: (Role.CULPRIT, A.MOVE_LEADERSHIP, S.HIGH,
                                   "requests wait for a free request handler thread (CPU or "
                                   "handler saturation)"),
    C.LOCAL_DISK_OR_PAGE_CACHE: (Role.CULPRIT, A.MOVE_LEADERSHIP, S.HIGH,
                                 "the broker's own work is slow (disk or page-cache misses)"),
    C.NETWORK_THREADS_SATURATED: (Role.CULPRIT, A.MOVE_LEADERSHIP, S.HIGH,
                                  "responses wait for a free network thread"),
    C.LEADER_REPLICATION_STALLED: (Role.CULPRIT, A.MOVE_LEADERSHIP, S.HIGH,
                                   "all its followers wait on it but fetch normally from other "
                                   "leaders: the broker itself is slow to serve replication"),
    C.SLOW_FOLLOWER: (Role.CULPRIT, A.PAGE_HUMAN, S.HIGH,
                      "as a follower it holds back acks=all writes on the leaders it "
                      "replicates from; moving leadership would not shorten those waits, it "
                      "must catch up or drop out of the ISR"),
    C.REMOTE_PRODUCE_SLOW_FOLLOWER: (Role.VICTIM, A.NONE, S.WARNING, ""),
    C.REMOTE_PRODUCE_UNKNOWN_FOLLOWER: (Role.UNATTRIBUTED, A.PAGE_HUMAN, S.WARNING,
                                        "acks=all writes wait for followers, but no follower "
                                        "stands out"),
    C.REMOTE_WAIT: (Role.UNATTRIBUTED, A.PAGE_HUMAN, S.WARNING,
                    "requests wait in purgatory for other brokers"),
    C.RESPONSE_SEND_SLOW: (Role.UNATTRIBUTED, A.PAGE_HUMAN, S.WARNING,
                           "responses are slow to send (no per-client data to tell a slow "
                           "client from the broker's network)"),
    C.NETWORK_SEND_SLOW: (Role.UNATTRIBUTED, A.PAGE_HUMAN, S.WARNING, ""),
    C.SLOW_UNATTRIBUTED: (Role.UNATTRIBUTED, A.PAGE_HUMAN, S.WARNING,
                          "no stage breakdown to attribute it"),
    C.CLIENT_SLOW_READ: (Role.CLIENT, A.NONE, S.WARNING, ""),
    C.QUOTA_THROTTLED: (Role.QUOTA, A.NONE, S.INFO,
                        "clients are held back by their quotas; not a broker fault"),
}


@dataclass(slots=True)   # not frozen: a fleet's evaluation makes ~400,000 of them
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
    # Windows judged together (rules.pool_quiet), their requests; `latency_ms` is their
    # least TP99.
    pooled_windows: int = 1
    pooled_requests: int | None = None
    # Rules 2b and 4b (rules.corroborated): the follower it waits on is late elsewhere.
    follower_corroborated: bool = False
    # Rule 6b (stalls.py): held in its own stages at instants the other brokers were too.
    shared_stall: bool = False

    @property
    def suspect(self) -> bool:
        return self.over_threshold and self.enough_traffic and not self.shared_stall and (
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


def attribution(cause: str, blamed: int | None = None, why: str = "",
                details: Mapping | None = None) -> Attribution:
    """A verdict of `cause` about `blamed`, as MEANING says."""
    role, action, severity, meaning = MEANING[cause]
    return Attribution(role, cause, blamed, action, severity, why or meaning, details or {})


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
    risen: set[int] = field(default_factory=set)  # risen, not suspect, would be blamed

    @property
    def slow(self) -> set[int]:
        """The brokers counted toward cluster-wide."""
        return self.blamed | self.quiet_slow | self.shared_stall | self.risen


def rank(v: BrokerVerdict) -> float:
    """A verdict's place among a broker's: its role's in `Role`'s order, except that an
    acks=all wait that names no follower comes after a victim's, which names it: the same
    wait, told less."""
    a = v.attribution
    if a.cause == SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER:
        return ROLE_ORDER.index(Role.VICTIM) + 0.5
    return ROLE_ORDER.index(a.role)
