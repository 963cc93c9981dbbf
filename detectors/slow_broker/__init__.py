"""Slow broker: a broker whose requests are slow, the stage that makes them slow, and who
is to blame: the broker, a follower it waits on, or nobody in particular. Per window,
broker and watched API, in this order (detect.assess_window):
1. judged latency: TotalTime TP99, less the purgatory wait of APIs that wait on purpose;
2. traffic floor: a quiet window is pooled with the slow ones before it (rules.py);
3. absolute threshold: nothing under it is a problem;
4. its own baseline or 5. its peers: a rise, or a broker always slow;
6. blame by explaining away (blame.py): its own stages make it the culprit, an acks=all
   wait the follower late at its other leaders too; a stall the other brokers shared at
   the same instants is no one's (stalls.py);
7. known disruptions explain what they cause (excuses.py);
8. what most brokers share is cluster-wide (the quiet and the risen counted too);
9. persistence over the recent windows (persistence.py).
Why each rule is so: docs/slow-broker.md."""

from detectors.slow_broker.blame import replication_bar, replication_waits
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.detect import assess_windows, detect_slow_brokers
from detectors.slow_broker.inputs import (ClientSendWindow, FollowerFetchWindow,
                                          HeldRequest, IsrShrink, LatencyBaseline,
                                          RequestStageWindow)
from detectors.slow_broker.verdicts import Role

__all__ = [
    "ClientSendWindow", "FollowerFetchWindow", "HeldRequest", "IsrShrink", "LatencyBaseline",
    "RequestStageWindow", "Role", "SlowBrokerSection", "assess_windows",
    "detect_slow_brokers", "replication_bar", "replication_waits",
]
