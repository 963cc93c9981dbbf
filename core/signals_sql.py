"""The SQL forms of core/signals.py's definitions, as text that DuckDB and Spark SQL both
read (no engine is imported here). Each is generated from the Python definition's own
data, read when called, so the forms cannot drift apart; tests/unit/test_signal_forms.py
runs both on the same rows."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from core import signals


def sql_string(value: str) -> str:
    """A string literal."""
    return "'" + value.replace("'", "''") + "'"


def in_names_sql(names: Iterable[str], api: str = "api") -> str:
    """The column `api` is one of `names` (exact names; false for none)."""
    names = sorted(set(names))
    return f"{api} IN ({', '.join(map(sql_string, names))})" if names else "false"


def in_purgatory_sql(api: str = "api") -> str:
    """signals.waits_in_purgatory over the column `api`."""
    return in_names_sql(signals.PURGATORY_APIS, api)


def judged_sql(total: str = "total_ms", remote: str = "remote_ms", api: str = "api") -> str:
    """signals.judged_ms over one request's columns."""
    return (f"CASE WHEN {in_purgatory_sql(api)} THEN greatest({total} - coalesce({remote}, "
            f"0.0), 0.0) ELSE {total} END")


def _double(ms: float) -> str:
    return f"CAST({float(ms)!r} AS DOUBLE)"


def threshold_case_sql(default_ms: float, per_api: Mapping[str, float], api: str = "api",
                       value: Callable[[float], str] = _double) -> str:
    """signals.threshold_for over the column `api`, each threshold written by `value`
    (a double by default; the read side writes the first histogram bucket at or over it)."""
    cases = " ".join(f"WHEN {api} = {sql_string(name)} THEN {value(float(ms))}"
                     for name, ms in per_api.items())
    default = value(float(default_ms))
    return f"CASE {cases} ELSE {default} END" if cases else default
