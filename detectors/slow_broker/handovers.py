"""When brokers started to lead or follow partitions: the events of the leadership_handover
and replicas_created disruptions (disruptions.py), from each broker's own "Leader <tp> ...
starts at leader epoch E" and "Follower <tp> starts at leader epoch E" lines. Epoch 0 is a
partition's first leader: a replica just created (a new topic or partition), nothing moved;
a leader line at a later epoch is a handover to that broker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaStart:
    cluster: str
    broker: int      # the broker that logged it, about itself
    event_ms: int
    topic: str
    partition: int
    leader_epoch: int = 1
    leads: bool = True

    @property
    def is_handover(self) -> bool:
        return self.leads and self.leader_epoch > 0

    @property
    def is_creation(self) -> bool:
        return self.leader_epoch == 0
