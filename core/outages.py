"""When each broker was out: fenced, shut down or unreachable, until the controller
unfenced it again. A broker that is out publishes none of its own signals, and one that
starts loads its logs before anything else runs; so an outage explains what a broker
does not say, and every detector that reads a missing signal asks this first. The read
side derives outages from the controllers' and the other brokers' log lines
(evaluation/inputs/slow_broker.py `outages_from`); the known disruptions
(core/disruptions.py) build on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class BrokerOutage:
    cluster: str
    broker: int
    start_ms: int
    end_ms: int | None   # back (unfenced) plus the grace; None: not back yet
    how: str             # what began it: broker_fenced, broker_shutdown, broker_registered
    back_ms: int | None = None   # when it was unfenced; None: not back yet


def back_since(outages: Iterable[BrokerOutage], cluster: str, broker: int,
               at_ms: int) -> float | None:
    """When `broker` last came back at or before `at_ms`, or +inf when it is out at
    `at_ms` (an outage begun by then that has not ended by then); None when no outage
    of it begun by then is known."""
    back: int | None = None
    for o in outages:
        if o.cluster != cluster or o.broker != broker or o.start_ms > at_ms:
            continue
        if o.back_ms is None or o.back_ms > at_ms:
            return float("inf")
        back = o.back_ms if back is None else max(back, o.back_ms)
    return back
