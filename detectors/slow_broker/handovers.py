"""When brokers became leaders: the events of the leadership_handover disruption
(disruptions.py), from each new leader's own "Leader <tp> ... starts at leader epoch E"
lines (epoch 0, a new topic, moved nothing)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeadershipGain:
    cluster: str
    broker: int      # the broker that became leader (and logged it)
    event_ms: int
    topic: str
    partition: int
