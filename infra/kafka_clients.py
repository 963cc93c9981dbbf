"""Client settings for a Kafka kmon talks to, from one config section, secrets resolved late.

The [telemetry] (monitoring Kafka) and [watch] (cluster under watch) sections hold
librdkafka settings in ``client_config`` and say where the SASL password lives
(``sasl_password_env`` or ``sasl_password_file``); the password itself is never in the
file and never printed (`redacted`).

- `librdkafka_config`: the dict a confluent-kafka Producer/Consumer/AdminClient takes. For
  the watched cluster it turns automatic topic creation off unless client_config says
  otherwise (`WATCH_DEFAULTS`).
- `spark_kafka_options`: the same connection for Spark's Kafka source (Java client keys
  with the ``kafka.`` prefix, SASL as a JAAS line, a PEM CA file as a PEM truststore).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config_keys import ConfigError, _key


@dataclass(frozen=True)
class TelemetrySection:
    bootstrap_servers: str = _key("Monitoring Kafka the agents publish to and the jobs read "
                                  "(pipeline.source = 'kafka'); empty in the embedded mode", "")
    topic_prefix: str = _key("Telemetry topics are <topic_prefix><stream>, e.g. "
                             "kmon.request_stages", "kmon.")
    client_config: dict = _key("librdkafka settings for the monitoring Kafka, e.g. "
                               '{"security.protocol" = "SASL_SSL", "sasl.mechanism" = '
                               '"SCRAM-SHA-512", "sasl.username" = "kmon", "ssl.ca.location" = '
                               '"/etc/kafka/ca.pem"}; the Spark source gets the Java '
                               "equivalents. Never put the password here", {})
    sasl_password_env: str = _key("Environment variable holding the SASL password", "")
    sasl_password_file: str = _key("File holding the SASL password (first line)", "")

@dataclass(frozen=True)
class WatchSection:
    cluster: str = _key("Name of the watched cluster; every row carries it", "local")
    bootstrap_servers: str = _key("Bootstrap servers of the watched cluster (offsets reader, "
                                  "end offsets, remediation); empty means the local cluster "
                                  "started by `kmon cluster up`", "")
    client_config: dict = _key("librdkafka settings for the watched cluster (security as in "
                               "[telemetry].client_config)", {})
    sasl_password_env: str = _key("Environment variable holding the SASL password", "")
    sasl_password_file: str = _key("File holding the SASL password (first line)", "")

# kmon asks the watched cluster for metadata, also of topics that may since have been
# deleted; a librdkafka AdminClient or Producer asks with allowAutoTopicCreation on by
# default, and a broker with auto.create.topics.enable (Kafka's default) then creates the
# topic again, with its default partitions and replication (a kept AdminClient does so at
# its next metadata refresh for every deleted topic it knew). A monitor must never create
# topics on the cluster it watches.
WATCH_DEFAULTS = {"allow.auto.create.topics": "false"}

SECRET_KEYS = ("sasl.password", "ssl.key.password", "ssl.keystore.password")

# librdkafka key -> Java client key, for the settings that differ or need translating.
_JAVA_SAME = ("security.protocol", "sasl.mechanism", "client.id",
              "ssl.endpoint.identification.algorithm")

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def sasl_password(section, name: str) -> str | None:
    """The SASL password from the environment variable or file the section names."""
    if section.sasl_password_env:
        value = os.environ.get(section.sasl_password_env)
        if value is None:
            raise ConfigError(f"key '{name}.sasl_password_env': environment variable "
                              f"{section.sasl_password_env} is not set")
        return value
    if section.sasl_password_file:
        p = Path(section.sasl_password_file).expanduser()
        try:
            return p.read_text().splitlines()[0].strip()
        except (OSError, IndexError) as e:
            raise ConfigError(f"key '{name}.sasl_password_file': cannot read a password from "
                              f"{p}: {e}") from None
    return None


def librdkafka_config(section, name: str, bootstrap_servers: str | None = None) -> dict[str, Any]:
    """Settings for confluent-kafka clients; `name` is the section name for error messages."""
    conf = dict(section.client_config)
    if isinstance(section, WatchSection):
        conf = {**WATCH_DEFAULTS, **conf}
    for k in SECRET_KEYS:
        if k in conf:
            raise ConfigError(f"key '{name}.client_config' holds '{k}': secrets come only from "
                              f"{name}.sasl_password_env or {name}.sasl_password_file")
    servers = bootstrap_servers or section.bootstrap_servers
    if not servers:
        raise ConfigError(f"key '{name}.bootstrap_servers' is empty")
    conf["bootstrap.servers"] = servers
    password = sasl_password(section, name)
    if password is not None:
        conf["sasl.password"] = password
    return conf


def spark_kafka_options(section, name: str, bootstrap_servers: str | None = None) -> dict[str, str]:
    """The same connection as options for Spark's Kafka source and sink."""
    conf = librdkafka_config(section, name, bootstrap_servers)
    # librdkafka's key only: the Java admin and producer do not know it (and warn), and
    # neither creates topics from a metadata request.
    conf.pop("allow.auto.create.topics", None)
    out = {"kafka.bootstrap.servers": conf.pop("bootstrap.servers")}
    for k in _JAVA_SAME:
        if k in conf:
            out[f"kafka.{k}"] = str(conf.pop(k))
    mechanism = out.get("kafka.sasl.mechanism", "").upper()
    username, password = conf.pop("sasl.username", None), conf.pop("sasl.password", None)
    if username is not None:
        module = _JAAS_MODULES.get(mechanism)
        if module is None:
            raise ConfigError(f"key '{name}.client_config': sasl.mechanism {mechanism or '(none)'} "
                              f"with a username is not supported for Spark; use one of "
                              f"{', '.join(_JAAS_MODULES)}")
        esc = lambda v: str(v).replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731
        out["kafka.sasl.jaas.config"] = (f'{module} required username="{esc(username)}" '
                                         f'password="{esc(password or "")}";')
    ca = conf.pop("ssl.ca.location", None)
    if ca:
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = str(ca)
    unknown = sorted(k for k in conf if not k.startswith(("statistics.", "linger.", "queue.",
                                                          "compression.", "acks",
                                                          "enable.idempotence")))
    # Anything else is passed through with the kafka. prefix: the Java client takes the
    # same name for most settings (e.g. request.timeout.ms).
    for k in unknown:
        out[f"kafka.{k}"] = str(conf[k])
    return out


def redacted(conf: dict[str, Any]) -> dict[str, Any]:
    """A copy safe to log: secrets and JAAS lines replaced."""
    return {k: ("***" if k in SECRET_KEYS or k.endswith("jaas.config") or "password" in k else v)
            for k, v in conf.items()}
