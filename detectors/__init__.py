"""Detectors: pure rules that turn small typed gold/silver rows into findings.

No Spark, no I/O, no clock: evaluation/inputs/ collects rows into the input
dataclasses each module declares, evaluation/detect.py runs every detector of registry.py over
them with `now_ms` and its config section, then `core.findings.update_findings` (identity and
lifecycle) and `correlation.correlate` (incidents), and writes the findings back with a
merge on finding_id. Imports here point only to core/.

- registry.py: every detector (its section, its inputs, its rules) and the one loop.
- slow_broker/: slow brokers, the stage to blame, slow followers, cluster-wide slowness.
- slow_client/: clients slow by their own requests or round trips (built on slow_broker/).
- offset_rewind.py: committed offsets moving back; its entry point runs offset_reset.py too.
- offset_reset.py: automatic resets and operators' forward resets of a group's position.
- offset_rewind_config.py: the [offset_rewind] config section both read.
- compaction_lag.py: a log cleaner that dies, stalls or falls behind; growing compacted logs.
- unclean_election.py: unclean leader elections (logged, replayed, meter only), truncations.
- lost_range.py: an unclean election's lost range and the groups that read into it.
- correlation.py: one incident from election to truncation to reset to rewind, and from a
  slow follower to the leaders it holds back.
- partition_signals.py: partition-level inputs shared by the offset and election detectors.
"""
