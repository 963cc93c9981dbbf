"""When brokers became leaders: the events of the leadership_handover disruption
(disruptions.py).

When leadership of a partition moves to a broker (a preferred-leader election,
`kafka-leader-election`, a reassignment, a rebalancer), the partition's other replicas
start fetching from it only once the metadata names it, and its clients move to it.
Signal: the broker's own "[Broker id=B] Leader <tp> ... starts at leader epoch E" lines
(silver.log_events kind leader_change with new_leader = the broker that logged it), as
`LeadershipGain`; leader epoch 0 (a new topic) moved nothing (jobs/detector_inputs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeadershipGain:
    cluster: str
    broker: int      # the broker that became leader (and logged it)
    event_ms: int
    topic: str
    partition: int
