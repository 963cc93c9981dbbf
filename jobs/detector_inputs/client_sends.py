"""The slow-broker detector's `ClientSendWindow` input, from silver.request_stages.

Per window/broker/client/API, replica fetches apart (`follower`): the request count, how
many sends took the API's threshold or more (slow_broker.threshold_ms, or
api_threshold_ms), the p99 of send_ms; watched APIs only. Only the rows the rules read:
- every row of a client with a slow send in the range: the slow-client rule judges a
  client by all its requests, at every broker (detectors/slow_broker/clients.py);
- every client's row at a broker/API/window where any send was slow: the rule leaves out
  a broker that sent late to most of its clients (its send path, not theirs);
- every client's row at the broker/API/windows whose stage row could be judged slow with
  ResponseSend dominant (`send_candidates`): rule 6 names the slow clients or the
  broker's network from them.
The keys of the slow sends come back first (few rows): a range with no slow send and no
candidate is one filtered scan of the rows already read, and groups nothing.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from core.signals import threshold_for
from detectors.slow_broker import ClientSendWindow, RequestStageWindow, SlowBrokerSection
from detectors.slow_broker.rules import dominant_stage, enough_traffic, judged_latency
from infra.lake import Lake
from jobs.detector_inputs.slow_broker import _stages_in, _window_start
from jobs.detector_inputs.tables import TimeRange


def send_candidates(rows: Iterable[RequestStageWindow], config: SlowBrokerSection
                    ) -> list[tuple[str, int, str, int]]:
    """(cluster, broker, api, window_start_ms) of the stage rows that could be judged slow
    with ResponseSend as their dominant stage: the only ones per-client data can explain."""
    out = []
    for r in rows:
        if not (r.api in config.watched_apis
                and enough_traffic(r.requests, config.min_requests_per_window)):
            continue
        if judged_latency(r) <= threshold_for(r.api, config.threshold_ms,
                                              config.api_threshold_ms):
            continue
        if dominant_stage(r)[0] == "send":
            out.append((r.cluster, r.broker, r.api, r.window_start_ms))
    return sorted(set(out))


def threshold_column(config: SlowBrokerSection) -> Column:
    """core.signals.threshold_for(api) as a Spark column: api_threshold_ms, else
    threshold_ms."""
    t = F.lit(float(config.threshold_ms))
    for api, ms in reversed(list(config.api_threshold_ms.items())):   # the first one wins
        t = F.when(F.col("api") == api, F.lit(float(ms))).otherwise(t)
    return t


def read_client_sends(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                      r: TimeRange, stage_rows: Sequence[RequestStageWindow],
                      stages: DataFrame | None = None) -> list[ClientSendWindow]:
    """Per window/broker/client/API (replica fetches apart): count, slow count (send_ms
    >= the API's threshold) and p99 of send_ms, for the rows the rules read: every row of
    a client with a slow send in the range (the slow-client rule judges it on all its
    requests), every client's row at a broker/API/window where anyone's send was slow
    (the rule's share of slow clients there) and at the stage rows that could be judged
    slow with ResponseSend dominant (rule 6). The slow sends' keys come back first (few):
    a range without any, and without a candidate, is one filtered scan, nothing grouped."""
    df = _stages_in(spark, lake, r, stages)
    if df is None:
        return []
    win = config.window_ms
    rows = (df.where(F.col("api").isin(list(config.watched_apis)))
            .select("cluster", "broker", "api", "send_ms",
                    F.coalesce("client_id", F.lit("(none)")).alias("client_id"),
                    F.coalesce(F.col("fetch_kind") == "follower", F.lit(False)).alias("follower"),
                    (F.col("send_ms") >= threshold_column(config)).alias("slow"),
                    _window_start(win).alias("window_start_ms")))
    slow = (rows.where("slow")
            .select("cluster", "broker", "api", "window_start_ms", "client_id", "follower")
            .distinct().collect())
    at_broker = set(send_candidates(stage_rows, config)) | {
        (x["cluster"], int(x["broker"]), x["api"], int(x["window_start_ms"])) for x in slow}
    clients = sorted({(x["cluster"], x["client_id"]) for x in slow if not x["follower"]})
    if not at_broker:
        return []
    brokers_df = spark.createDataFrame(
        sorted(at_broker), "cluster string, broker int, api string, window_start_ms long")
    clients_df = spark.createDataFrame(clients, "cluster string, client_id string")
    wanted = (rows.join(F.broadcast(brokers_df.withColumn("_at_broker", F.lit(True))),
                        ["cluster", "broker", "api", "window_start_ms"], "left")
              .join(F.broadcast(clients_df.withColumn("_client", F.lit(True))),
                    ["cluster", "client_id"], "left")
              .where(F.coalesce("_at_broker", F.lit(False))
                     | (F.coalesce("_client", F.lit(False)) & ~F.col("follower"))))
    out = (wanted.groupBy("cluster", "window_start_ms", "broker", "client_id", "api",
                          "follower")
           .agg(F.count(F.lit(1)).alias("requests"),
                F.coalesce(F.sum(F.col("slow").cast("int")), F.lit(0)).alias("slow_requests"),
                F.percentile_approx("send_ms", 0.99, 10_000).alias("send_p99"))
           .collect())
    return [ClientSendWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                             broker=int(x["broker"]), client_id=x["client_id"],
                             requests=int(x["requests"]), send_p99_ms=float(x["send_p99"] or 0.0),
                             api=x["api"], slow_requests=int(x["slow_requests"]),
                             follower=bool(x["follower"])) for x in out]
