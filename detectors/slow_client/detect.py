"""The slow-client detector's order: both rules on each of the slow-broker detector's
windows (`assess_clients`), then persistence as for brokers (`detect_slow_clients`): one
finding per client, its slow reads before its link. A producer is not judged for its link
in a window where a broker it talks to is the subject of a known disruption (out, warming
up, taking leaderships, creating replicas: the slow-broker table): its round trips then
hold reconnects, metadata refreshes and retries, not only its path; and leaving out just
that broker would leave out the counter-evidence it gives."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from core.disruptions import ReplicaStart, active_in, disruptions_from
from core.findings import Detection
from core.outages import BrokerOutage
from detectors.slow_broker import ClientSendWindow, RequestStageWindow, SlowBrokerSection
from detectors.slow_client.links import (ClientRttWindow, LinkVerdict, ProducerServerWindow,
                                        judge_links, link_detection)
from detectors.slow_client.readers import ClientVerdict, client_detection, judge_clients
from detectors.windowed import by_cluster_window, recent_windows


@dataclass(frozen=True)
class ClientAssessment:
    """The clients slow in one window of one cluster: slow readers and slow links."""
    cluster: str
    window_start_ms: int
    clients: Mapping[str, ClientVerdict] = field(default_factory=dict)
    links: Mapping[str, LinkVerdict] = field(default_factory=dict)


def assess_clients(rows: Iterable[RequestStageWindow], *,
                   client_sends: Iterable[ClientSendWindow] = (),
                   client_rtts: Iterable[ClientRttWindow] = (),
                   producer_times: Iterable[ProducerServerWindow] = (),
                   outages: Sequence[BrokerOutage] = (),
                   replica_starts: Sequence[ReplicaStart] = (),
                   config: SlowBrokerSection | None = None) -> list[ClientAssessment]:
    """Every window with stage rows, oldest first, per cluster: the stage rows give each
    broker's request count and Produce time, `producer_times` what the brokers took for
    each producer's own requests; `outages` and `replica_starts` the known disruptions."""
    config = config or SlowBrokerSection()
    rows_by_cw = by_cluster_window(rows)
    sends, rtts = by_cluster_window(client_sends), by_cluster_window(client_rtts)
    own = by_cluster_window(producer_times)
    disruptions = disruptions_from(outages, replica_starts)
    out = []
    for cluster, start in sorted(rows_by_cw):
        watched = [r for r in rows_by_cw[(cluster, start)] if r.api in config.watched_apis]
        disrupted = {d.subject for d in active_in(disruptions, cluster, start,
                                                   start + config.window_ms,
                                                   config.disruption_grace_s)}
        window_rtts = rtts.get((cluster, start), ())
        unsettled = {x.client_id for x in window_rtts if x.broker in disrupted}
        trips = [x for x in window_rtts if x.client_id not in unsettled]
        out.append(ClientAssessment(cluster, start,
                                    judge_clients(sends.get((cluster, start), ()), watched,
                                                  config),
                                    judge_links(trips, watched, config,
                                                own.get((cluster, start), ()))))
    return out


def persistent(recent: Sequence[ClientAssessment],
               verdicts: Callable[[ClientAssessment], Mapping], needed: int
               ) -> dict[str, list[int]]:
    """Client -> the windows holding a verdict for it, when at least `needed` do."""
    windows: dict[str, list[int]] = defaultdict(list)
    for a in recent:
        for client in verdicts(a):
            windows[client].append(a.window_start_ms)
    return {c: ws for c, ws in sorted(windows.items()) if len(ws) >= needed}


def detect_slow_clients(rows: Iterable[RequestStageWindow], *,
                        client_sends: Iterable[ClientSendWindow] = (),
                        client_rtts: Iterable[ClientRttWindow] = (),
                        producer_times: Iterable[ProducerServerWindow] = (),
                        config: SlowBrokerSection | None = None, **inputs) -> list[Detection]:
    """slow_client detections: a client flagged in persistence_windows of the last
    persistence_lookback_windows windows (`inputs`: the other ones of `assess_clients`).
    Each window is judged on its own, so only those windows are."""
    config = config or SlowBrokerSection()
    rows = list(rows)
    recent_starts = recent_windows(rows, config)
    wanted = {(c, s) for c, starts in recent_starts.items() for s in starts}

    def in_wanted(items: Iterable) -> list:
        return [x for x in items if (x.cluster, x.window_start_ms) in wanted]

    assessments = assess_clients(in_wanted(rows), client_sends=in_wanted(client_sends),
                                 client_rtts=in_wanted(client_rtts),
                                 producer_times=in_wanted(producer_times), config=config,
                                 **inputs)
    by_cw = {(a.cluster, a.window_start_ms): a for a in assessments}
    detections = []
    for cluster, starts in sorted(recent_starts.items()):
        recent = [by_cw[(cluster, s)] for s in starts if (cluster, s) in by_cw]
        reads = persistent(recent, lambda a: a.clients, config.persistence_windows)
        links = persistent(recent, lambda a: a.links, config.persistence_windows)
        detections += [client_detection(cluster, by_cw[(cluster, ws[-1])].clients[c], ws,
                                        config) for c, ws in reads.items()]
        detections += [link_detection(cluster, by_cw[(cluster, ws[-1])].links[c], ws, config)
                       for c, ws in links.items() if c not in reads]
    return detections
