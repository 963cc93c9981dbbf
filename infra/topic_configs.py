"""Topic configs of a Kafka cluster, from its AdminClient: topic -> {config name -> value}.

`describe_topic_configs` lists the topics and describes their effective configs (broker
defaults included) in one request; what they mean to a detector is decided above infra
(evaluation.inputs.compaction keeps the compacted topics).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def admin_client(admin_config: Any) -> Any:
    """`admin_config` itself when it is an AdminClient (or anything that describes
    configs), else a new AdminClient over that librdkafka configuration."""
    from confluent_kafka.admin import AdminClient

    return (admin_config if hasattr(admin_config, "describe_configs")
            else AdminClient(dict(admin_config)))


def describe_topic_configs(admin_config: Any, cluster: str,
                           timeout_s: float = 15.0) -> dict[str, dict[str, str | None]]:
    """Every topic's effective configs (name -> value), from AdminClient describe_configs;
    a topic whose configs could not be described is logged (naming `cluster`) and left out.

    `admin_config` is a librdkafka configuration, or an AdminClient to use. A long-running
    caller passes one client and keeps it: a client dropped while requests to a stopped
    broker are still in flight can abort the process inside librdkafka (seen in the demo:
    ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed`` after
    describe_configs timeouts during the unclean-election fault)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = admin_client(admin_config)
    names = sorted(admin.list_topics(timeout=timeout_s).topics)
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                     request_timeout=timeout_s)
    out = {}
    for resource, fut in futures.items():
        try:
            out[resource.name] = {k: e.value
                                  for k, e in fut.result(timeout=timeout_s + 5).items()}
        except Exception as e:  # noqa: BLE001 - one topic's error must not hide the others
            log.warning("describe_configs %s on %s: %s", resource.name, cluster, e)
    return out
