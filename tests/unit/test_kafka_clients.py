"""Kafka client settings: secrets only from env or file, Spark options translated, nothing leaked."""

import pytest

from core.config_keys import ConfigError
from infra.kafka_clients import librdkafka_config, redacted, spark_kafka_options
from kmon.config import load_config


def _telemetry(tmp_path, **keys):
    cfg = load_config().with_overrides(telemetry={"bootstrap_servers": "mon:9093", **keys})
    return cfg.telemetry


def test_sasl_ssl_settings_become_java_options_with_a_jaas_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KMON_PW", 's3cr"et')
    t = _telemetry(tmp_path, client_config={"security.protocol": "SASL_SSL",
                                            "sasl.mechanism": "SCRAM-SHA-512",
                                            "sasl.username": "kmon",
                                            "ssl.ca.location": "/etc/kmon/ca.pem",
                                            "request.timeout.ms": "30000"},
                   sasl_password_env="KMON_PW")
    conf = librdkafka_config(t, "telemetry")
    assert conf["sasl.password"] == 's3cr"et' and conf["bootstrap.servers"] == "mon:9093"
    opts = spark_kafka_options(t, "telemetry")
    assert opts["kafka.security.protocol"] == "SASL_SSL"
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="kmon" password="s3cr\\"et";')
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == "/etc/kmon/ca.pem"
    assert opts["kafka.request.timeout.ms"] == "30000"
    assert "s3cr" not in str(redacted(conf)) and "s3cr" not in str(redacted(opts))


def test_password_from_a_file(tmp_path):
    f = tmp_path / "pw"
    f.write_text("from-file\n")
    t = _telemetry(tmp_path, sasl_password_file=str(f),
                   client_config={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                  "sasl.username": "u"})
    assert librdkafka_config(t, "telemetry")["sasl.password"] == "from-file"
    assert "PlainLoginModule" in spark_kafka_options(t, "telemetry")["kafka.sasl.jaas.config"]


def test_a_password_in_the_file_config_is_refused_naming_the_key(tmp_path):
    t = _telemetry(tmp_path, client_config={"sasl.password": "plain"})
    with pytest.raises(ConfigError, match="telemetry.client_config.*sasl.password"):
        librdkafka_config(t, "telemetry")


def test_missing_env_variable_and_missing_servers_are_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_PW", raising=False)
    with pytest.raises(ConfigError, match="telemetry.sasl_password_env.*NOPE_PW"):
        librdkafka_config(_telemetry(tmp_path, sasl_password_env="NOPE_PW"), "telemetry")
    with pytest.raises(ConfigError, match="watch.bootstrap_servers"):
        librdkafka_config(load_config().watch, "watch")


def test_watched_cluster_clients_never_create_topics_unless_told():
    watch = load_config().with_overrides(watch={"bootstrap_servers": "b:9092"}).watch
    assert librdkafka_config(watch, "watch")["allow.auto.create.topics"] == "false"
    told = load_config().with_overrides(watch={"bootstrap_servers": "b:9092", "client_config": {
        "allow.auto.create.topics": "true"}}).watch
    assert librdkafka_config(told, "watch")["allow.auto.create.topics"] == "true"
    # Only librdkafka knows the key: the Java clients get no such option.
    assert not any("auto.create" in k for k in spark_kafka_options(watch, "watch"))
    telemetry = load_config().with_overrides(telemetry={"bootstrap_servers": "m:9093"}).telemetry
    assert "allow.auto.create.topics" not in librdkafka_config(telemetry, "telemetry")
