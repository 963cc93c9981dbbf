"""Slow broker: a broker whose requests are slow, the stage that makes them slow, and who
is to blame: the broker, a follower it waits on, or nobody in particular.

Signal (inputs.py): per broker, API and window (window_s), the request count and the p99
of TotalTime and of each stage; the leaders' view of each follower's fetches; ISR
shrinks; each client's sends; the requests the edge kept whole, as held in the brokers'
own stages; outages (core/outages.py) and replica starts (handovers.py).

Rules, in order, per window, broker and watched API (detect.assess_window):
1. judged latency: TotalTime TP99, without the purgatory wait of the APIs that wait on
   purpose (rules.py);
2. traffic floor (min_requests_per_window): a quiet window is pooled with the slow ones
   before it, since a slow broker cuts its own traffic;
3. absolute threshold (threshold_ms, api_threshold_ms): nothing under it is a problem;
4. its own baseline (history_ratio) or 5. its peers (peer_ratio): a rise, or a broker
   always slow;
6. blame by explaining away (blame.py): its own stages make it the culprit; an acks=all
   wait names the follower late at the other leaders too (which also lowers the bars of
   2 and 4 for that wait); a few slow readers are the clients' (detectors/slow_client);
   a stall the other brokers' requests shared at the same instants is no one's (stalls.py);
7. known disruptions explain what they cause (disruptions.py, disruption_grace_s);
8. what most brokers share (shared_cause_share) is cluster-wide, blaming no broker;
9. persistence (persistence.py): persistence_windows of the last
   persistence_lookback_windows windows.

Output: slow_broker on "broker:<id>" and cluster_wide_slowness on "cluster:<name>",
explained by evidence.py. Keys: config.py. Why each rule is so: docs/slow-broker.md.
"""

from detectors.slow_broker.blame import Waits, common_party, replication_bar, replication_waits
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.detect import assess_windows, detect_slow_brokers
from detectors.slow_broker.handovers import ReplicaStart
from detectors.slow_broker.inputs import (STAGES, ClientSendWindow, FollowerFetchWindow,
                                          HeldRequest, IsrShrink, LatencyBaseline,
                                          RequestStageWindow)
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.rules import dominant_stage, median_without
from detectors.slow_broker.verdicts import Role

__all__ = [
    "STAGES", "ClientSendWindow", "FollowerFetchWindow", "HeldRequest", "IsrShrink",
    "LatencyBaseline",
    "ReplicaStart", "RequestStageWindow", "Role",
    "SlowBrokerSection", "Waits", "assess_windows", "common_party", "detect_slow_brokers",
    "detections_from", "dominant_stage", "median_without", "replication_bar",
    "replication_waits",
]
