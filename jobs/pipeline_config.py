"""The [pipeline] section: how the streaming queries read, write and trigger.

Kept apart from jobs/pipeline.py so the configuration loads without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import _key
from schemas.quarantine import MAX_EVENT_AHEAD_S


@dataclass(frozen=True)
class PipelineSection:
    source: str = _key("Where the streaming jobs read telemetry: 'landing' (embedded: agents write "
                       "JSON-lines files under <storage_root>/landing) or 'kafka' (telemetry topics "
                       "on the monitoring Kafka, see [telemetry])", "landing",
                       choices=("landing", "kafka"))
    bronze_tables: bool = _key("Keep bronze.<stream> tables, a replayable copy of every raw "
                               "record (repeats an agent re-sent dropped), written by the silver "
                               "queries in the same micro-batch. false: the landing files, or "
                               "the topics' retention, are the only raw copy", True)
    write_threads: int = _key("Tables a silver micro-batch writes at once (bronze, silver and "
                              "quarantine tables, the counts row). Each Delta append is mostly "
                              "fixed latency (planning, reading the table's log, the commit), "
                              "so overlapping them shortens a batch; 1 writes one at a time",
                              4, min=1, max=64)
    silver_trigger_s: float = _key("Micro-batch interval of the silver query (every stream not "
                                   "in slow_streams), seconds", 10.0, min=0.5, max=3600)
    detect_trigger_s: float = _key("How often the detectors evaluate, seconds", 20.0, min=1,
                                   max=3600)
    detect_after_silver_commit: bool = _key(
        "Start each evaluation right after the silver query commits a micro-batch (waiting "
        "at most two silver_trigger_s for it), not at a random point between two commits: "
        "telemetry reaches a finding up to one silver interval sooner instead of up to one "
        "detect_trigger_s, with the same number of evaluations", True)
    slow_trigger_s: float = _key("Micro-batch interval of the queries no detector waits for "
                                 "(slow_streams, the per-minute gold tables), seconds: each "
                                 "micro-batch has a fixed cost, so on a small machine fewer of "
                                 "them leave room for the ones that matter", 60.0, min=0.5,
                                 max=3600)
    slow_streams: list = _key("Streams read by the silver_slow query, on slow_trigger_s "
                              "(client_stats is not: the slow-link rule reads it)",
                              ["partition_offsets", "quarantine"])
    dedupe_window_s: int = _key("How long silver remembers record ids to drop repeats an agent "
                                "re-sent after a crash (state is bounded by this)", 600,
                                min=10, max=86400)
    max_event_ahead_s: int = _key("A row stamped more than this ahead of its ingest time goes "
                                  "to quarantine as future_event_time and moves no watermark: "
                                  "one bad line or one clock running ahead cannot make other "
                                  "rows late (the agents hold their lines to the same bound "
                                  "against their host's clock). Keep it below the gold tables' lateness: their "
                                  "watermarks follow the newest row of every source",
                                  MAX_EVENT_AHEAD_S, min=10,
                                  max=86400)
    offset_lag_lookback_days: int = _key("How far back gold.offset_lag_1m looks for a group's "
                                         "last commit", 7, min=1, max=365)
    max_offsets_per_trigger: int = _key("Kafka source: most records per micro-batch per query "
                                        "(over all its topics)",
                                        2_000_000, min=1000)
    max_files_per_trigger: int = _key("Landing source: most files per micro-batch per query",
                                      1000, min=1)
    progress_interval_s: float = _key("How often `kmon run` prints per-query progress", 10.0,
                                      min=1, max=3600)
    exporter_port: int = _key("Port of kmon's Prometheus exporter (findings, pipeline and agent "
                              "health) during `kmon run`; 0 turns it off", 9464, min=0, max=65535)
