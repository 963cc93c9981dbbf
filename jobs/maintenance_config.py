"""The [maintenance] section: when and how kmon keeps its Delta tables healthy.

Kept apart from jobs/maintenance.py so the configuration loads without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import _key

# Delta refuses a VACUUM that keeps less than this unless told to (a shorter retention can
# delete files a stopped stream or a time-travel query still needs).
DELTA_MIN_RETAIN_H = 168


@dataclass(frozen=True)
class MaintenanceSection:
    every_h: float = _key("How often `kmon run` maintains its Delta tables (compaction of the "
                          "open day's small files, Z-order of each closed day, VACUUM), "
                          "hours; the first pass runs this long after the start. 0: never "
                          "(run `kmon maintain` yourself, e.g. from cron)", 6.0, min=0,
                          max=24 * 7)
    vacuum_retain_h: float = _key(
        "VACUUM deletes data files no table version of the last this many hours needs. A "
        "streaming query stopped for longer, or a time-travel query further back, then "
        "fails: keep it above the longest kmon may be stopped. Below Delta's own floor of "
        "168 the floor's check is turned off for the VACUUM", 168.0, min=1, max=24 * 365)
    zorder: bool = _key("Z-order each closed day of a table that has a broker and a time "
                        "column by (broker, time), once: a broker's day, or an hour of the "
                        "fleet, then reads a few files instead of every file of the day "
                        "(bench/bench_root_cause.py)", True)
    closed_after_h: float = _key("A day's partition counts as closed (no more appends: "
                                 "late rows come within the streams' lateness bounds) this "
                                 "many hours after the day ends", 1.0, min=0, max=72)
    small_file_mb: int = _key("In the open day's partition, files below this size are "
                              "compacted together (larger ones are left as they are, so a "
                              "pass does not rewrite the day again)", 32, min=1, max=1024)
    prune_landing: bool = _key("Delete the landing folder's files (embedded mode) that a "
                               "committed batch of the lake's streaming queries has read and "
                               "that are older than landing_retain_h (jobs/landing_retention.py)",
                               True)
    landing_retain_h: float = _key("Landing files younger than this stay, read or not: the raw "
                                   "copy of recent telemetry, to look at or replay", 24.0,
                                   min=0, max=24 * 365)
