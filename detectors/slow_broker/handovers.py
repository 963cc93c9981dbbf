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
`LeadershipGain`. In the windows that overlap [gain, gain + grace_ms) (HANDOVER_GRACES x
slow_broker.disruption_grace_s), detect.py sets aside that broker's verdicts whose cause
is a Remote wait naming no follower (remote_produce_unknown_follower, remote_wait). A
verdict that names a follower stands, and a broker still slow in Remote after the grace
is judged as usual.

The new leader also takes over the partitions' clients and their load: its own stages
(request queue, Local, response queue) can slow down in the first seconds on a loaded
host. Seen in the matrix (crash-restart-3b, live): 112 s after broker 2 was back, the
controller's preferred-leader election moved 33 partitions off broker 3, 17 of them to
broker 1, and broker 1's response queue TP99 went over the threshold in the next windows:
the detector paged "broker 1, network threads saturated", and its remediation would have
moved those leaderships away again. Such a verdict, in the grace, of a broker not blamed
in the window before, is a warning victim of the handover with no action (detect.py
`loaded_by_handover`); it does not count toward cluster-wide. One still slow after the
grace is judged as any other, so a broker that is really slow is paged at most the grace
later. Leader epoch 0 (a new topic) is not a handover (jobs/detector_inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# A new leader's unnamed Remote waits and own-stage load are set aside this many
# disruption graces: its followers find it within a metadata refresh.
HANDOVER_GRACES = 0.5


@dataclass(frozen=True)
class LeadershipGain:
    cluster: str
    broker: int      # the broker that became leader (and logged it)
    event_ms: int
    topic: str
    partition: int


def new_leaders_during(gains: Sequence[LeadershipGain], cluster: str, start_ms: int,
                       end_ms: int, grace_ms: int) -> dict[int, int]:
    """The brokers of the cluster that took leadership of a partition less than grace_ms
    before some time in [start_ms, end_ms), each with how many partitions it took."""
    partitions: dict[int, set[tuple[str, int]]] = {}
    for g in gains:
        if g.cluster == cluster and g.event_ms < end_ms and g.event_ms + grace_ms > start_ms:
            partitions.setdefault(g.broker, set()).add((g.topic, g.partition))
    return {b: len(tps) for b, tps in partitions.items()}

