"""What the slow-broker detector is given, per cluster and window (the read side,
evaluation/inputs/request_windows.py, builds them from the agents' windows)."""

from __future__ import annotations

from dataclasses import dataclass

from core.signals import STAGES

# The stages a broker spends its own time in when its API waits in Remote on purpose.
STAGES_OUTSIDE_REMOTE = tuple(s for s in STAGES if s != "remote")
_P99_FIELD = {s: f"{s}_p99_ms" for s in STAGES}


@dataclass(frozen=True)
class RequestStageWindow:
    """A broker/API's requests in a window: how many, the p99 of TotalTime and of each
    stage, and the exact p99 of (total - remote) per request when known."""
    cluster: str
    broker: int
    api: str
    window_start_ms: int
    requests: int
    total_p99_ms: float
    request_queue_p99_ms: float = 0.0
    local_p99_ms: float = 0.0
    remote_p99_ms: float = 0.0
    throttle_p99_ms: float = 0.0
    response_queue_p99_ms: float = 0.0
    send_p99_ms: float = 0.0
    total_excl_remote_p99_ms: float | None = None

    def stage_p99(self, stage: str) -> float:
        return getattr(self, _P99_FIELD[stage]) or 0.0


@dataclass(frozen=True)
class FollowerFetchWindow:
    """A follower's replica fetches as its leader saw them: the longest silence between two
    (a fetch's arrival minus the previous one's completion) and the p99 send time."""
    cluster: str
    window_start_ms: int
    leader: int
    follower: int
    requests: int
    max_fetch_gap_ms: float | None = None
    send_p99_ms: float = 0.0


@dataclass(frozen=True)
class IsrShrink:
    """A leader's "Shrinking ISR from <before> to <after>"."""
    cluster: str
    event_ms: int
    leader: int
    topic: str
    partition: int
    isr_before: tuple[int, ...]
    isr_after: tuple[int, ...]

    @property
    def out_of_sync(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.isr_before) - set(self.isr_after)))


@dataclass(frozen=True)
class ClientSendWindow:
    """One client's requests of one API at one broker in a window. `slow_requests`: how
    many took the API's threshold or more to send (None: unknown, bounded from the p99);
    `follower`: a replica's fetches (a broker, not a client)."""
    cluster: str
    window_start_ms: int
    broker: int
    client_id: str
    requests: int
    send_p99_ms: float
    api: str | None = None
    slow_requests: int | None = None
    follower: bool = False


@dataclass(frozen=True)
class LatencyBaseline:
    """A broker/API's usual judged latency from a longer history than the input holds."""
    cluster: str
    broker: int
    api: str
    p99_ms: float


@dataclass(frozen=True)
class HeldRequest:
    """A request the edge kept whole that its broker held in its own stages (OWN_STAGES,
    summed) for `held_ms`; it ended at `end_ms` after `total_ms`."""
    cluster: str
    broker: int
    api: str
    end_ms: int
    total_ms: float
    held_ms: float

    @property
    def start_ms(self) -> float:
        return self.end_ms - self.total_ms
