"""Slow broker: a broker whose requests are slow, the stage that makes them slow, and who
is to blame (the broker, one of its followers, its clients, or nobody in particular); and
slow clients, judged by their own requests (clients.py).

Signal (typed below; gold computes them from the request log, which has every request's
exact stage times; the JMX histograms are smoothed over minutes and too late for the
detection target):
- `RequestStageWindow`: per cluster/broker/API/window, the request count and the p99 of
  TotalTime and of each stage: RequestQueue, Local, Remote, Throttle, ResponseQueue,
  ResponseSend. Optionally `total_excl_remote_p99_ms`, the exact p99 of (total - remote)
  per request, which gold can compute from the request log.
- `FollowerFetchWindow`: per leader/follower/window, what the leader saw of the follower's
  replica fetches (request log FETCH lines with replicaId >= 0): how many, the longest
  silence between two of them (`max_fetch_gap_ms`: a fetch's arrival minus the previous
  one's completion) and the p99 ResponseSend time (a follower that reads slowly).
- `IsrShrink`: "Shrinking ISR from ... Out of sync replicas: (...)" lines of a leader.
- `ClientSendWindow`: per broker/client/API/window, a client's requests, how many were
  slow to send (ResponseSend >= the API's threshold) and their p99 ResponseSend time.
- `LatencyBaseline` (optional): a broker/API's usual latency from a longer history than
  the detector is given (e.g. gold's trailing median over the last hour, computed with
  `rules.judged_latency`'s definition). Without it, the baseline is the median of the broker's
  earlier non-suspect windows in the input.

Adapter (Spark -> these dataclasses):
- RequestStageWindow <- the gold stage-percentile table (jobs/gold.py): window_start_ms =
  unix_millis(window_start), cluster, broker, api, requests, <stage>_p99_ms. Gold must
  run with window = window_s and a watermark of a few seconds for the detection target
  (its defaults, 1-minute windows and a 2-minute watermark, emit a window 3 minutes after
  it starts). API names are the request log's (core/kafka_apis.py): JMX's FetchConsumer
  and FetchFollower are one Fetch, a purgatory API either way.
- FollowerFetchWindow <- silver.request_stages where fetch_kind = 'follower': leader =
  broker, follower = fetch_replica_id; per connection (broker, follower, remote_addr: each
  replica fetcher thread fetches in sequence) ordered by ts_ms (the completion time),
  gap = (ts_ms - total_ms) - lag(ts_ms), i.e. a fetch's arrival minus the previous one's
  completion, so purgatory time is not in it; max per window; send_p99_ms = p99 of
  send_ms.
- ClientSendWindow <- silver.request_stages grouped by window, broker, client_id, api
  and replica fetch or not: count, count of send_ms >= the API's threshold, p99 of
  send_ms; only for the clients with a slow send in the range, the broker/API/windows
  with one, and those whose stage row could be slow with ResponseSend dominant
  (jobs/detector_inputs/client_sends.py).
- IsrShrink <- silver.log_events kind = isr_shrink (leader = broker).

Algorithm, per window (`window_s`, default 10 s), per broker and API (rules in
order, rules.py; detect.assess_window states the whole order):
1. latency: TotalTime TP99, except for APIs that wait in purgatory on purpose
   (`core.signals.PURGATORY_APIS`: Fetch, JoinGroup, SyncGroup). A
   Fetch waits in Remote time until fetch.min.bytes arrive or fetch.max.wait.ms
   (replica.fetch.wait.max.ms for followers) runs out, 500 ms by default: on a quiet,
   healthy cluster Fetch TotalTime sits near 500 ms. That wait measures the absence of
   data, not the broker, so for those APIs the latency is the time outside Remote: the
   exact p99 of (total - remote) when gold gives it, else the larger of
   p99(total) - p99(remote) and the largest non-remote stage p99 (the latter is a true
   lower bound of p99(total - remote); the former is close when one population of
   requests dominates the tail). We chose this over a higher Fetch threshold because a
   threshold would either hide real Fetch slowness below ~800 ms or fire for every
   client that sets fetch.max.wait.ms above it; subtracting Remote is independent of
   client settings. Remote time still counts for Produce (acks=all waits for followers,
   which is real latency) and every other API.
2. enough_traffic: requests >= min_requests_per_window (100). Few requests make a p99 of
   one or two samples; a broker serving almost nothing must never be "slow"
   (cruise-control #1142: negligible-traffic brokers were its main false positive). Below
   100 requests the p99 is the slowest request alone: one slow commit among twenty is not
   a slow broker (scenario one_slow_request_among_twenty_is_not_a_slow_broker in
   tests/unit/test_detector_slow_broker.py). But clients wait for their answers, so a
   slow broker cuts its own request rate: a window too quiet alone, over the threshold,
   is judged with the consecutive windows before it that were over the threshold too (at
   most POOL_WINDOWS, 6), once they hold enough requests together, at the least of their
   TP99s (a lower bound of the pooled TP99: rules.pool_quiet; scenario
   delayed_follower_that_starves_its_leaders_traffic_is_named).
   2b. An acks=all write (Produce, OffsetCommit) too quiet for that, with Remote its
   dominant stage, whose leader waits on a follower that is late at the other leaders it
   follows too (the follower's fetches are the evidence, see 4b), is judged once it,
   pooled the same way, holds CORROBORATED_MIN_REQUESTS (20), if its latency is at least
   CORROBORATED_HISTORY_RATIO x its baseline (blame.corroborated_by_follower): a
   leader held back by a follower serves fewer writes, so waits that are real are often
   too few to judge alone.
3. over_threshold: latency > threshold_ms (300 ms) or api_threshold_ms[api]. An absolute
   floor: a broker at 40 ms when it usually does 10 is not a problem (cruise-control
   #1185 added the same floor after false positives).
4. slow_vs_history: latency >= history_ratio (3) x the broker's own baseline for the API.
   Without an external baseline, the baseline is the median of the broker/API's earlier
   non-suspect windows with enough traffic (MIN_HISTORY_WINDOWS, 6, of them); a broker too
   quiet to have those has its quiet windows instead (as many, holding
   min_requests_per_window requests together): each one's TP99 is about its slowest
   request, so that baseline is high and the rule only harder to meet. Without it, a
   quiet broker's pooled slow windows (rule 2) had nothing to be compared with, its peers
   being as quiet: a broker frozen on a quiet cluster was never named.
5. slow_vs_peers: latency >= peer_ratio (3) x the median of the other brokers' latency
   for the same API in the same window (at least MIN_PEERS, 2, of them with traffic).
   4b. follower_corroborated: an acks=all write (Produce, OffsetCommit, TxnOffsetCommit)
   with Remote its dominant stage whose leader waits on a follower that is late at the
   other leaders it follows too (blame.corroborated_by_follower), and latency >=
   CORROBORATED_HISTORY_RATIO (1.5) x its baseline. When the culprit is a follower of
   most leaders, the peers wait on it as well, and its earlier lags raised the leaders'
   baselines: the other leaders' fetch data is a second sign, so the history bar is lower.
   suspect = 2 and 3 and (4 or 4b or 5). History catches a fleet-wide rise (every broker
   above its own past); peers catch a broker that has always been slow. A cluster that
   always runs at 320 ms with no follower to blame is neither, however close to the
   threshold; one that runs over it because one follower always lags names that follower.
6. attribution of a suspect row: the dominant stage is the one with the largest p99
   share (Remote left out for purgatory APIs):
   - request_queue -> request_handlers_saturated; local -> local_disk_or_page_cache;
     response_queue -> network_threads_saturated. The broker is the culprit:
     move_leadership.
   - remote on Produce (or OffsetCommit / TxnOffsetCommit: the coordinator's acks=all
     append to __consumer_offsets) -> the follower that holds acks=all back (below). The finding
     names the reporting leader (role victim, cause remote_produce_slow_follower, action
     none: moving its leadership would not help) and its evidence names the follower;
     the follower is blamed in its own finding (cause slow_follower, or its own stage
     cause when it is slow itself; held_back_leaders lists the leaders).
   - remote on another non-purgatory API -> remote_wait, unattributed, page_human.
   - send -> the clients: when the slow clients (ResponseSend p99 >= the API's threshold)
     are at most shared_cause_share of the broker's clients, client_slow_read naming them
     (MAX_NAMED), role client: not a broker finding, the clients are judged on
     their own (below); when most are slow, network_send_slow (the broker's network
     path), page_human; without client data response_send_slow, page_human.
   - throttle -> quota_throttled, info, action none: quotas doing their job.
   - no stage data -> slow_unattributed, page_human.
   One verdict per broker per window, by role: culprit, unattributed, victim, quota,
   client (a broker blamed for anything is reported as that; a broker whose only verdict
   is its slow clients is no finding).

Slow clients (clients.py; its docstring has the rule and why): a client is judged by its
own requests, not by a broker's percentile: a slow reader that is 1% of a broker's
traffic is still a slow reader, and the broker is not slow. Per window, client and API,
over every broker it talks to (replica fetches and brokers that sent late to most of
their clients left out): at least CLIENT_MIN_SLOW (2) of its requests slow to
send, and at least CLIENT_SLOW_SHARE (0.5) of them. Finding: slow_client on
"client:<client_id>", cause client_slow_read, severity warning, action none, with the
brokers, its requests, the slow ones, its send p99 and its share of each broker's
requests.

Slow producer links (client_links.py; its docstring has the rule): a producer behind a
slow network path waits long for every answer while the brokers serve it as fast as
anyone; only its librdkafka statistics show it (`ClientRttWindow`: its rtt p99 per
broker). Per window and producer: at every broker judged, its rtt p99 minus what the
broker took for that producer's own Produce requests (`ProducerServerWindow`; the broker's
Produce TotalTime TP99 where those are not known) is the Produce threshold or more, and
other producers at that broker were fine (or it is so at two brokers or more). Finding:
slow_client on "client:<client_id>", cause client_slow_link, severity warning, action none.

Slow-follower attribution for a leader L (a Produce verdict dominated by Remote), by
explaining away (blame.common_party) over the holdback matrix, leader x follower: a
follower's holdback at a leader is max(max_fetch_gap_ms, send_p99_ms), the whole window
for a follower that stopped fetching. A follower is late at a leader past LATE_FLOOR_MS
(1,000), or past threshold_ms while it stands out (peer_ratio x the median of that
leader's other followers). Candidates are the followers late at L or named by L's ISR
shrinks. The other leaders a candidate follows confirm it (late at most of them, its
median holdback there past the floor, or the worst follower at every leader it follows by
WORST_MARGIN, 1.5, past WORST_MIN_MS, 500) or refute it; with no other leader, L's shrink
or its standing out at L confirms it. The confirmed candidate L waited on longest is
blamed. Otherwise, when every follower of L is late there but fine elsewhere, L itself is
slow to serve replication (leader_replication_stalled, culprit); else
remote_produce_unknown_follower, unattributed. A broker slow in its own stages that also
holds leaders back keeps its own cause, the leaders listed.

Cluster-wide: in each window, the blamed brokers are the culprits (self or as followers)
and the unattributed; victims, slow clients and quotas are not blamed. If more than
shared_cause_share (0.5) of the brokers with traffic are blamed, and at least
MIN_SHARED (2), the window yields one cluster_wide_slowness verdict
instead of any broker verdict: a fleet-wide signal is not a broker's fault (and the
remediation step must not move leadership off half the fleet). A broker too quiet to be
judged in the window (under min_requests_per_window, not pooled) counts as slow here when
it served at least QUIET_SLOW_MIN_REQUESTS (50) requests over its threshold, at
history_ratio x its own baseline, slow in its own stages (a queue or Local): a stall of
the host or the cluster slows every broker and cuts the quieter ones' traffic below the
floor, and the busiest broker would otherwise be blamed alone. It is detected when all of
the last persistence_lookback_windows (3) hold it: it names no culprit and suggests no
action, and two slow windows on every broker are a loaded host's stall (JVMs warming up
after a restart, say), not an event to page on.

Persistence and decay: a broker (or the cluster, or a client) is detected when it has a
verdict in at least persistence_windows (2) of the last persistence_lookback_windows (3)
windows; a broker's verdict on quiet windows pooled together (rule 2) at least
POOLED_STRONG_RATIO (2) x its threshold holds for each of them, and a follower
blamed only by its leaders takes the longest such pool among them. The finding reports
the verdict of the strongest role among those windows (culprit before unattributed), the
newest of them: a culprit named 20 s ago is not replaced by a window that can only say
"unattributed" (persistence.strongest). One
noisy window never fires; a broker paused in bursts that spare a window now and then
still fires; after recovery the detection lasts until fewer than 2 of the last 3 windows
hold a verdict (at most two more windows), and the finding resolves resolve_after_s later
(findings.py). Detection-time budget, the acceptance target being under 60 s from fault
start: the first faulty window closes within window_s of the fault, the second one
window_s later, so the evidence is complete 2 x window_s = 20 s after the fault; the
time for a window to count as closed (WINDOW_CLOSE_SLACK_MS once every broker's rows are
past it, gold's watermark delay at the latest: jobs/detector_inputs/), the pipeline's
latency and the detector's trigger interval come on top. With 1-minute windows the same
rule would need 2-3 minutes: window_s is a parameter, and its default is 10 s for that
reason.

Unfixable (suggested page_human instead of move_leadership): cluster-wide slowness,
unattributed slowness, a slow follower seen only through the leaders it holds back
(moving leadership does not shorten acks=all waits on other leaders; the follower must
catch up or drop out of the ISR), and a broker whose clients' network is slow.

Config keys ([slow_broker] section, `SlowBrokerSection`), defaults:
window_s = 10, min_requests_per_window = 100, threshold_ms = 300, api_threshold_ms = {},
watched_apis = [Produce, Fetch, Metadata, OffsetCommit, OffsetFetch, ListOffsets],
history_ratio = 3.0, peer_ratio = 3.0, persistence_windows = 2,
persistence_lookback_windows = 3, shared_cause_share = 0.5, broker_session_timeout_s = 9,
disruption_grace_s = 60. API names in watched_apis and api_threshold_ms may be spelled
any way (case, underscores, JMX's FetchConsumer): they are made canonical when read
(core.signals.canonical_api), an unknown one is an error. The rules' other numbers are
constants in the module of the rule that uses them, each with its reason.

Known disruptions explain what they cause (disruptions.py, one table): a broker out
(crashed, hung past its session, shut down, restarting) until disruption_grace_s after
its unfence, its warm-up until 3x that, and a leadership handover until 0.5x that after
the new leader's "Leader ... starts" line. Each says whose verdicts it sets aside and
whose own-stage slowness is only a warning victim with no action.

Input: pass closed windows only (an open window's p99 is of a partial population), at
least persistence_lookback_windows of them, and MIN_HISTORY_WINDOWS more when no
`LatencyBaseline` is given. Output: `Detection`s of type slow_broker (entity
"broker:<id>"), cluster_wide_slowness (entity "cluster:<name>") and slow_client (entity
"client:<client_id>").

Modules, in the order the detector uses them:
- config.py: `SlowBrokerSection`, the [slow_broker] keys. The request signals it shares
  with the edge and the read side (API names, purgatory APIs, a request's judged latency,
  the per-API threshold) are core/signals.py's.
- inputs.py: the input dataclasses and the request stages.
- rules.py: rules 1-5 and the dominant stage, on one broker/API/window.
- blame.py: rule 6 by explaining away: whose fault a suspect row is, the follower that
  holds a leader's acks=all writes back, and when it is cluster-wide.
- outages.py, handovers.py: when each broker was out, when a broker became leader.
- disruptions.py: the known disruptions, and whose verdicts each explains for how long.
- clients.py: the clients slow by their own requests, and their findings.
- verdicts.py: causes, roles, and the rules' results kept for tests and evidence.
- detect.py: `assess_window`, which applies the rules, blame and disruptions in order
  per window, and `detect_slow_brokers`.
- persistence.py: persistence_windows of persistence_lookback_windows, then findings.
- evidence.py: each finding's explanation and evidence.
"""

from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.detect import assess_windows, detect_slow_brokers
from detectors.slow_broker.blame import Waits, common_party, replication_bar, replication_waits
from detectors.slow_broker.inputs import (
    STAGES,
    ClientRttWindow,
    ClientSendWindow,
    FollowerFetchWindow,
    IsrShrink,
    LatencyBaseline,
    ProducerServerWindow,
    RequestStageWindow,
)
from detectors.slow_broker.rules import dominant_stage, median_without
from detectors.slow_broker.handovers import LeadershipGain
from detectors.slow_broker.outages import (BrokerOutage, BrokerState, BrokerStateChange,
                                           BrokerUnreachable)
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.verdicts import Role

__all__ = [
    "STAGES",
    "BrokerOutage",
    "BrokerState",
    "BrokerStateChange",
    "BrokerUnreachable",
    "ClientRttWindow",
    "ClientSendWindow",
    "FollowerFetchWindow",
    "IsrShrink",
    "LatencyBaseline",
    "LeadershipGain",
    "ProducerServerWindow",
    "RequestStageWindow",
    "Role",
    "SlowBrokerSection",
    "Waits",
    "assess_windows",
    "common_party",
    "detect_slow_brokers",
    "detections_from",
    "dominant_stage",
    "median_without",
    "replication_bar",
    "replication_waits",
]
