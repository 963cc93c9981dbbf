"""Slow clients: a client judged by its own requests and round trips, not by a broker's
percentile. The brokers are fine and kmon cannot fix a client, so each finding is a
warning with no action, slow_client on "client:<client_id>", one per client:

- readers.py (cause client_slow_read): most of its requests slow to send, at the brokers
  that serve their other clients normally;
- links.py (cause client_slow_link): a producer whose round trips are slow while the
  brokers serve its own requests fast.

Both judge the slow-broker detector's windows with its [slow_broker] keys and persist as
its brokers do (detect.py); docs/slow-broker.md says why. The slow-broker rules name no
client: a broker slow only through a few slow readers is no slow_broker finding.
"""

from detectors.slow_client.detect import ClientAssessment, assess_clients, detect_slow_clients
from detectors.slow_client.links import (ClientRttWindow, LinkVerdict, ProducerServerWindow,
                                        judge_links)
from detectors.slow_client.readers import ClientVerdict, judge_clients, slow_count

__all__ = ["ClientAssessment", "ClientRttWindow", "ClientVerdict", "LinkVerdict",
           "ProducerServerWindow", "assess_clients",
           "detect_slow_clients", "judge_clients", "judge_links", "slow_count"]
