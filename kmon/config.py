"""kmon's one typed configuration.

Every key is declared once here, with its type, default, bounds and meaning, beside the
section it belongs to. `load_config` reads a TOML file (conf/kmon.toml by default),
applies `KMON__SECTION__KEY=value` environment overrides, and validates everything
before anything starts: an unknown key, a wrong type or a value out of range stops
start-up with a `ConfigError` that names the key and where it came from.

Secrets are never read from the file as plain values: keys that end in `_env` name an
environment variable and keys that end in `_file` name a file holding the secret.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from detectors.compaction_lag import CompactionLagSection
from detectors.correlation import CorrelationSection
from detectors.findings import FindingsSection
from detectors.offset_rewind import OffsetRewindSection
from detectors.slow_broker import SlowBrokerSection
from detectors.unclean_election import UncleanElectionSection
from kmon.config_keys import ConfigError, _key  # noqa: F401 - ConfigError is re-exported
from remediation.config import RemediationSection

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_FILE = REPO_ROOT / "conf" / "kmon.toml"
ENV_PREFIX = "KMON__"


@dataclass(frozen=True)
class KmonSection:
    work_dir: str = _key("Working area for the venv, jars, local clusters and the embedded lake; "
                         "relative paths are taken from the repository root", ".kmon")
    log_level: str = _key("Log level of kmon's own logs", "INFO",
                          choices=("DEBUG", "INFO", "WARNING", "ERROR"))


@dataclass(frozen=True)
class SparkSection:
    master: str = _key("Spark master: local[N] embedded, or spark://, yarn, k8s://... on a fleet",
                       "local[2]")
    app_name: str = _key("Spark application name", "kmon")
    storage_root: str = _key("Root of the Delta lake and checkpoints; empty means <work_dir>/lake. "
                             "On a fleet: s3a://bucket/kmon, abfss://..., hdfs://...", "")
    shuffle_partitions: int = _key("spark.sql.shuffle.partitions", 4, min=1, max=100000)
    driver_memory: str = _key("spark.driver.memory (local mode: the whole Spark heap)", "2g")
    ui_enabled: bool = _key("Start the Spark UI (off by default in the embedded mode)", False)
    log_level: str = _key("Spark's own log level", "WARN",
                          choices=("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"))
    codegen: str = _key("Compile each query to JVM bytecode (whole-stage codegen): on, off, or "
                        "auto (off with a local master). Off runs every query interpreted: no "
                        "compile per new plan, the better trade for the many small queries of "
                        "one machine (a plan's times are literals in its code, so each detector "
                        "evaluation and micro-batch compiled anew); keep it on for a cluster's "
                        "large batches", "auto", choices=("auto", "on", "off"))
    extra_conf: dict = _key("Extra Spark settings passed as-is, e.g. "
                            "{\"spark.hadoop.fs.s3a.endpoint\" = \"...\"}", {})


@dataclass(frozen=True)
class JvmSection:
    maven_repo: str = _key("Maven repository the JVM jars come from (a mirror URL works too)",
                           "https://repo.maven.apache.org/maven2")
    offline: bool = _key("Never download: use only jars already in the working area", False)
    java_home: str = _key("JAVA_HOME for Spark and the local brokers; empty means the java on PATH",
                          "")


@dataclass(frozen=True)
class LocalClusterSection:
    name: str = _key("Name of the embedded cluster (its folder under <work_dir>/clusters)", "local")
    brokers: int = _key("Number of KRaft nodes (each a broker)", 3, min=1, max=9)
    controllers: int = _key("How many of the nodes are KRaft controllers as well: the "
                            "highest-numbered ones, the rest are brokers only (as on a fleet, "
                            "where the quorum runs apart from the brokers, stopping two brokers "
                            "then leaves the quorum up); 0: every node", 0, min=0, max=9)
    base_port: int = _key("First port to use; 0 allocates free loopback ports", 0, min=0, max=65535)
    heap: str = _key("Java heap per broker (-Xmx and -Xms)", "512m")
    ready_timeout_s: float = _key("How long to wait for the cluster to be ready", 120.0,
                                  min=5, max=3600)
    extra_broker_config: dict = _key("Extra server.properties entries for every broker", {})


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
    gold_trigger_s: float = _key("Micro-batch interval of gold.request_stages_10s (what the "
                                 "slow-broker detector reads), seconds", 10.0, min=0.5, max=3600)
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
    slow_streams: list = _key("Streams read by the silver_slow query, on slow_trigger_s",
                              ["client_stats", "partition_offsets", "quarantine"])
    dedupe_window_s: int = _key("How long silver remembers record ids to drop repeats an agent "
                                "re-sent after a crash (state is bounded by this)", 600,
                                min=10, max=86400)
    fast_window_s: int = _key("Window of gold.request_stages_10s, seconds", 10, min=1, max=60)
    fast_watermark_s: int = _key("Watermark of the fast stage table: its windows close this long "
                                 "after the newest row (rows later than this are counted in the "
                                 "query progress and kept by the minute table)", 10, min=1, max=600)
    fast_stage_table: bool = _key("Run the streaming query that writes gold.request_stages_10s. "
                                  "Either way the slow-broker detector takes the windows that "
                                  "table has not closed yet from silver.request_stages; false "
                                  "leaves the table out and the detector computes every window "
                                  "from silver at each evaluation: one stateful query fewer on a "
                                  "small machine, more work per evaluation on a large fleet", True)
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


SECTIONS: dict[str, type] = {
    "kmon": KmonSection,
    "spark": SparkSection,
    "jvm": JvmSection,
    "local_cluster": LocalClusterSection,
    "pipeline": PipelineSection,
    "telemetry": TelemetrySection,
    "watch": WatchSection,
    "findings": FindingsSection,
    "slow_broker": SlowBrokerSection,
    "offset_rewind": OffsetRewindSection,
    "compaction_lag": CompactionLagSection,
    "unclean_election": UncleanElectionSection,
    "correlation": CorrelationSection,
    "remediation": RemediationSection,
}


@dataclass(frozen=True)
class Config:
    kmon: KmonSection = field(default_factory=KmonSection)
    spark: SparkSection = field(default_factory=SparkSection)
    jvm: JvmSection = field(default_factory=JvmSection)
    local_cluster: LocalClusterSection = field(default_factory=LocalClusterSection)
    pipeline: PipelineSection = field(default_factory=PipelineSection)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)
    watch: WatchSection = field(default_factory=WatchSection)
    findings: FindingsSection = field(default_factory=FindingsSection)
    slow_broker: SlowBrokerSection = field(default_factory=SlowBrokerSection)
    offset_rewind: OffsetRewindSection = field(default_factory=OffsetRewindSection)
    compaction_lag: CompactionLagSection = field(default_factory=CompactionLagSection)
    unclean_election: UncleanElectionSection = field(default_factory=UncleanElectionSection)
    correlation: CorrelationSection = field(default_factory=CorrelationSection)
    remediation: RemediationSection = field(default_factory=RemediationSection)
    source: str = "<defaults>"

    @property
    def work_dir(self) -> Path:
        p = Path(self.kmon.work_dir).expanduser()
        return p if p.is_absolute() else REPO_ROOT / p

    @property
    def storage_root(self) -> str:
        return self.spark.storage_root or str(self.work_dir / "lake")

    def with_overrides(self, **sections: dict[str, Any]) -> "Config":
        """A copy with some keys replaced, validated like the file (tests use this)."""
        raw = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        for name, values in sections.items():
            if name not in SECTIONS:
                raise ConfigError(f"{self.source}: unknown section [{name}]")
            raw[name].update(values)
        return _build(raw, self.source)


def _coerce(value: Any, typ: type, where: str) -> Any:
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if typ is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if typ is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ConfigError(f"{where}: expected a table, got {value!r}")
    if typ is list:
        if isinstance(value, list):
            return list(value)
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    raise ConfigError(f"{where}: unsupported type {typ}")


def _build_section(cls: type, values: dict[str, Any], source: str, section: str) -> Any:
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key '{section}.{unknown[0]}' "
            f"(known keys in [{section}]: {', '.join(sorted(known))})")
    kwargs = {}
    for name, value in values.items():
        where = f"{source}: key '{section}.{name}'"
        v = _coerce(value, hints[name], where)
        meta = known[name].metadata
        if meta.get("min") is not None and v < meta["min"]:
            raise ConfigError(f"{where} must be >= {meta['min']}, got {v!r}")
        if meta.get("max") is not None and v > meta["max"]:
            raise ConfigError(f"{where} must be <= {meta['max']}, got {v!r}")
        if meta.get("choices") and v not in meta["choices"]:
            raise ConfigError(f"{where} must be one of {', '.join(meta['choices'])}, got {v!r}")
        kwargs[name] = v
    return cls(**kwargs)


def _build(raw: dict[str, Any], source: str) -> Config:
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}] "
                          f"(known sections: {', '.join(SECTIONS)})")
    built = {}
    for name, cls in SECTIONS.items():
        values = raw.get(name, {})
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        built[name] = _build_section(cls, values, source, name)
    return Config(**built, source=source)


def _env_overrides(environ: dict[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for k, v in environ.items():
        if not k.startswith(ENV_PREFIX):
            continue
        parts = k[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2:
            raise ConfigError(f"environment variable {k}: expected {ENV_PREFIX}SECTION__KEY")
        out.setdefault(parts[0], {})[parts[1]] = v
    return out


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """Read, override from the environment, validate. Raises ConfigError naming the key."""
    environ = dict(os.environ if environ is None else environ)
    if path is None:
        path = environ.get("KMON_CONFIG") or DEFAULT_CONFIG_FILE
    path = Path(path)
    source = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{source}: configuration file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    for section, values in _env_overrides(environ).items():
        if section not in SECTIONS:
            raise ConfigError(f"environment: unknown section in {ENV_PREFIX}{section.upper()}__...")
        raw.setdefault(section, {}).update(values)
    if _env_overrides(environ):
        source = f"{source} (+ {ENV_PREFIX}* environment)"
    return _build(raw, source)


def describe_keys() -> str:
    """Every key with its default and meaning, as TOML comments (for docs and --help)."""
    lines = []
    for name, cls in SECTIONS.items():
        lines.append(f"[{name}]")
        for f in fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"# {f.metadata['doc']}")
            lines.append(f"{f.name} = {_toml_value(default)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(x)}' for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)
