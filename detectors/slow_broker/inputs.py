"""What the detector is given, per cluster and window (built by
evaluation/inputs/request_windows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from core.signals import STAGES

# The stages a broker spends its own time in when its API waits in Remote on purpose.
STAGES_OUTSIDE_REMOTE = tuple(s for s in STAGES if s != "remote")
_P99_FIELD = {s: f"{s}_p99_ms" for s in STAGES}


@dataclass(frozen=True)
class RequestStageWindow:
    """A broker/API's requests in a window: how many, the p99 of TotalTime, of each stage,
    and of (total - remote) when known."""
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
    """A follower's fetches at its leader: the longest silence between two (arrival minus
    the previous completion) and the p99 send time."""
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
    """One client's requests of one API at one broker in a window; `slow_requests`: how
    many took the threshold or more to send (None: unknown); `follower`: a replica's."""
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
    """A broker/API's usual judged latency over a longer history than the input."""
    cluster: str
    broker: int
    api: str
    p99_ms: float


@dataclass(frozen=True)
class HeldRequest:
    """A request kept whole, held `held_ms` in its broker's own stages; it ended at
    `end_ms` after `total_ms`."""
    cluster: str
    broker: int
    api: str
    end_ms: int
    total_ms: float
    held_ms: float

    @property
    def start_ms(self) -> float:
        return self.end_ms - self.total_ms
