"""The Prometheus scrape jobs kmon's dashboards expect: who carries which labels.

The JMX exporter on a broker knows nothing about its cluster or node id, so Prometheus adds
them as target labels: every broker target gets ``cluster`` (kmon's name for the cluster)
and ``broker`` (the node id). Every dashboard's ``cluster`` and ``broker`` variables and
selectors rest on those two labels. kmon's own exporter (job ``kmon``, the name
alerts/kmon-rules.yml watches with ``up{job="kmon"}``) gets no such labels: its series
carry ``cluster`` themselves where it applies, and a target label would shadow it.

On a fleet the same labels usually come from service discovery relabelling; these helpers
write the static form used on one machine and in tests.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from urllib.parse import urlparse

KAFKA_JOB = "kafka"
KMON_JOB = "kmon"


def kafka_scrape_job(cluster: str, metrics_urls: Mapping[int, str], *,
                     job: str = KAFKA_JOB) -> dict[str, Any]:
    """One job for a cluster's brokers: node id -> JMX exporter URL (``Node.metrics_url``)."""
    static = []
    paths = set()
    for broker, url in sorted(metrics_urls.items()):
        parsed = urlparse(url)
        paths.add(parsed.path or "/metrics")
        static.append({"targets": [parsed.netloc],
                       "labels": {"cluster": cluster, "broker": str(broker)}})
    if len(paths) > 1:
        raise ValueError(f"brokers of {cluster} serve metrics on different paths: {paths}")
    # Job names must be unique in a config: one job per cluster.
    return {"job_name": f"{job}-{cluster}",
            "metrics_path": paths.pop() if paths else "/metrics",
            "static_configs": static}


def kmon_scrape_job(targets: Sequence[str], *, job: str = KMON_JOB) -> dict[str, Any]:
    """kmon's exporter (findings, pipeline and agent health): host:port targets."""
    return {"job_name": job, "static_configs": [{"targets": list(targets)}]}
