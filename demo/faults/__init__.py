"""Faults caused for real on a local cluster, and the workload they disturb.

`kmon demo` and the detector scenario tests use the same pieces:

- `workload.Workload`: producers with acks=all and acks=1, consumer groups that commit,
  a compacted topic, running in background threads until stopped; its consumers log
  through librdkafka into files the client-log agent follows.
- one module per fault (`slow_broker`, `offset_rewind`, `compaction_lag`,
  `unclean_election`), each a `base.Fault`: `inject` disturbs the cluster and returns when
  the fault is in place (or over), `heal` puts things back, and `detected_by` says which
  finding proves it was seen.

Nothing here writes telemetry or findings: faults only act on the cluster, the way an
operator, a bad disk or a crash would. Whether kmon notices is up to the pipeline.
"""
