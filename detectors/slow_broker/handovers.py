"""A broker that has just taken over leadership waits on its new followers: not slowness.

When leadership of a partition moves to a broker (the controller's preferred-leader
election after a restart, `kafka-leader-election`, a reassignment, a rebalancer moving
leaders), the partition's other replicas learn of the new leader from the metadata and
only then start fetching from it; until their first fetches arrive, the new leader's
acks=all writes wait in Remote for them. Seen in the matrix (rolling-restart-3b, a healthy
run): 2 min 48 s after the rolling restart began, the controller's periodic preferred-leader
election gave broker 3 back 18 partitions, and broker 3's acks=all Produce TP99 was 1,548
ms, then 843 ms, all of it Remote, with no follower late enough to be named: the detector
paged "slow broker 3, Remote wait on an unknown follower".

Signal: the broker's own "[Broker id=B] Leader <tp> ... starts at leader epoch E" lines
(silver.log_events kind leader_change with new_leader = the broker that logged it), as
`LeadershipGain`. In the windows that overlap [gain, gain + grace_ms), detect.py sets
aside that broker's verdicts whose cause is a Remote wait naming no follower
(remote_produce_unknown_follower, remote_wait). Its other verdicts (a slow disk, busy
handlers, a follower it names) stand, and a broker still slow in Remote after the grace is
judged as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class LeadershipGain:
    cluster: str
    broker: int      # the broker that became leader (and logged it)
    event_ms: int
    topic: str
    partition: int


def new_leaders_during(gains: Sequence[LeadershipGain], cluster: str, start_ms: int,
                       end_ms: int, grace_ms: int) -> set[int]:
    """The brokers of the cluster that took leadership of a partition less than grace_ms
    before some time in [start_ms, end_ms)."""
    return {g.broker for g in gains
            if g.cluster == cluster and g.event_ms < end_ms and g.event_ms + grace_ms > start_ms}

