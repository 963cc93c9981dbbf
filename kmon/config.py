"""kmon's one typed configuration.

Every key is declared once, with its type, default, bounds and meaning, in the section
of the package that uses it (infra/, jobs/pipeline.py, detectors/, remediation/, core/);
this module assembles those sections into one `Config` (nothing below the application
imports it: a component takes its own section, or a Protocol of the sections it reads). `load_config` reads a TOML file (conf/kmon.toml by default),
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

from core.config_keys import ConfigError, _key  # noqa: F401 - ConfigError is re-exported
from core.findings import FindingsSection
from detectors.compaction_lag import CompactionLagSection
from detectors.correlation import CorrelationSection
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.slow_broker import SlowBrokerSection
from detectors.unclean_election import UncleanElectionSection
from infra.jvm_deps import JvmSection
from infra.kafka_clients import TelemetrySection, WatchSection
from infra.local_cluster import LocalClusterSection
from infra.spark_session import SparkSection
from ingest.request_log_config import RequestLogSection
from jobs.maintenance_config import MaintenanceSection
from jobs.pipeline_config import PipelineSection
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


SECTIONS: dict[str, type] = {
    "kmon": KmonSection,
    "spark": SparkSection,
    "jvm": JvmSection,
    "local_cluster": LocalClusterSection,
    "pipeline": PipelineSection,
    "maintenance": MaintenanceSection,
    "telemetry": TelemetrySection,
    "request_log": RequestLogSection,
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
    maintenance: MaintenanceSection = field(default_factory=MaintenanceSection)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)
    request_log: RequestLogSection = field(default_factory=RequestLogSection)
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
        if isinstance(value, str):     # from the environment: a TOML array, "[1, 2]"
            try:
                value = tomllib.loads(f"v = {value}")["v"]
            except tomllib.TOMLDecodeError:
                pass
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
