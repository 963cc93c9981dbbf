"""What the slow-broker detector is given: per-window request stages, follower fetches,
ISR shrinks, per-client send times and optional latency baselines (the package docstring
says where each comes from)."""

from __future__ import annotations

from dataclasses import dataclass

# A request's stages in the order it passes them, and their JMX names.
STAGES = ("request_queue", "local", "remote", "throttle", "response_queue", "send")
STAGE_NAMES = {"request_queue": "RequestQueue", "local": "Local", "remote": "Remote",
               "throttle": "Throttle", "response_queue": "ResponseQueue", "send": "ResponseSend"}


@dataclass(frozen=True)
class RequestStageWindow:
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
        return getattr(self, f"{stage}_p99_ms") or 0.0


@dataclass(frozen=True)
class FollowerFetchWindow:
    cluster: str
    window_start_ms: int
    leader: int
    follower: int
    requests: int
    max_fetch_gap_ms: float | None = None
    send_p99_ms: float = 0.0


@dataclass(frozen=True)
class IsrShrink:
    """A leader's "Shrinking ISR from <before> to <after>" (silver.log_events kind
    isr_shrink: broker is the leader)."""
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
    `follower`: a replica's fetches (a broker, not a client: judged by blame.py)."""
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
class ClientRttWindow:
    """A client's own view of one broker in a window, from its librdkafka statistics: the
    highest rtt p99 (request sent to response received, ms) of its documents in the
    window, and the rtt p50 of the latest of them (None: not known;
    jobs/detector_inputs/client_rtts.py says why); `client_type` producer or consumer
    (detectors/slow_broker/client_links.py)."""
    cluster: str
    window_start_ms: int
    client_id: str
    client_type: str
    broker: int
    rtt_p99_ms: float
    rtt_p50_ms: float | None = None


@dataclass(frozen=True)
class ProducerServerWindow:
    """What one producer's own Produce requests took at one broker in a window, from the
    request log (TotalTime p99 and p50 of that client's requests; p50 None: not known):
    the broker's side of its round trips, for the slow-link rule
    (detectors/slow_broker/client_links.py)."""
    cluster: str
    window_start_ms: int
    broker: int
    client_id: str
    requests: int
    total_p99_ms: float
    total_p50_ms: float | None = None
    # The share of these requests the broker read as soon as it had answered the one
    # before on the same connection: they had waited in the socket, a time their round
    # trips hold and their TotalTime does not (None: not known).
    queued_share: float | None = None


@dataclass(frozen=True)
class LatencyBaseline:
    cluster: str
    broker: int
    api: str
    p99_ms: float
