"""When each broker was out: the events of the broker_out and broker_warmup disruptions
(disruptions.py). A broker that died holds its leaders' acks=all writes until it is
fenced, and one that restarts catches up while its clients reconnect: out, not slow. The
read side derives them from the controllers' and the other brokers' log lines
(evaluation/inputs/slow_broker.py `outages_from`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerOutage:
    cluster: str
    broker: int
    start_ms: int
    end_ms: int | None   # back (unfenced) plus the grace; None: not back yet
    how: str             # what began it: broker_fenced, broker_shutdown, broker_registered
    back_ms: int | None = None   # when it was unfenced; None: not back yet
