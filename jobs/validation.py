"""One declaration of validity per silver table, used three ways.

A table module in schemas/ declares ``REQUIRED`` (columns never null) and ``CHECKS``
(rule name -> Spark SQL condition). From those:

- `rules`: the silver job's row rules. Every row is tested in the same micro-batch, with
  SQL only (no Python on the row path); a row that breaks one goes to quarantine with the
  first rule it broke as its reason.
- `add_constraints`: Delta CHECK and NOT NULL-equivalent constraints on the silver table,
  so nothing that bypasses the job (a manual INSERT, a bug) can write an invalid row.
- `expectation_suite` / `validate_with_great_expectations`: the same rules as a
  great-expectations suite, run over any slice of a silver table (`kmon validate`), a
  second, independent check that the table holds what the rules promise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType

from pyspark.sql import Column
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Rule:
    """A row is valid for this rule when `valid_sql` is true (null counts as broken)."""
    name: str
    valid_sql: str


def rules(table: ModuleType) -> tuple[Rule, ...]:
    required = tuple(Rule(f"missing_field:{c}", f"{c} IS NOT NULL") for c in table.REQUIRED)
    checks = tuple(Rule(n, sql) for n, sql in getattr(table, "CHECKS", {}).items())
    return required + checks


def first_broken_rule(table_rules: tuple[Rule, ...]) -> Column:
    """The name of the first rule a row breaks, or null when it breaks none."""
    checks = [F.when(~F.coalesce(F.expr(r.valid_sql), F.lit(False)), F.lit(r.name))
              for r in table_rules]
    return F.coalesce(*checks) if checks else F.lit(None).cast("string")


def constraint_name(rule: Rule) -> str:
    return "kmon_" + re.sub(r"[^a-z0-9]+", "_", rule.name.lower()).strip("_")


def constraint_properties(table: ModuleType) -> dict[str, str]:
    """The rules as Delta table properties, to create a table with its constraints in one commit."""
    return {f"delta.constraints.{constraint_name(r)}": f"coalesce({r.valid_sql}, false)"
            for r in rules(table)}


def add_constraints(spark, path: str, table: ModuleType) -> list[str]:
    """Add every rule as a Delta CHECK constraint on the table at `path` (idempotent); a
    rule whose expression changed since the table was made (a kind added to the list of
    known kinds) replaces its old constraint, which would refuse the new rows. Returns the
    names added or replaced."""
    existing = {r["key"].removeprefix("delta.constraints."): r["value"]
                for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
                if r["key"].startswith("delta.constraints.")}
    added = []
    for rule in rules(table):
        name, check = constraint_name(rule), f"coalesce({rule.valid_sql}, false)"
        if name in existing:
            if _normal(existing[name]) == _normal(check):
                continue
            spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT {name}")
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT {name} CHECK ({check})")
        added.append(name)
    return added


def _normal(sql: str) -> str:
    """A constraint's expression without the outer brackets and spacing Delta may add."""
    sql = re.sub(r"\s+", "", sql)
    while sql.startswith("(") and sql.endswith(")"):
        sql = sql[1:-1]
    return sql


def expectation_suite(name: str, table: ModuleType):
    """The table's rules as a great-expectations suite."""
    import great_expectations as gx

    suite = gx.ExpectationSuite(name=name)
    for c in table.REQUIRED:
        suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column=c))
    for rule_name, sql in getattr(table, "CHECKS", {}).items():
        suite.add_expectation(gx.expectations.UnexpectedRowsExpectation(
            unexpected_rows_query=f"SELECT * FROM {{batch}} WHERE NOT coalesce({sql}, false)",
            description=rule_name))
    return suite


@dataclass(frozen=True)
class ValidationResult:
    table: str
    rows: int
    success: bool
    failures: tuple[str, ...]  # "<expectation>: <details>" for each failed expectation


def validate_with_great_expectations(df, name: str, table: ModuleType) -> ValidationResult:
    """Run the table's suite over a DataFrame (a silver table or a slice of one)."""
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_spark(name=f"kmon_{name}")
    asset = source.add_dataframe_asset(name=name)
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": df})
    result = batch.validate(expectation_suite(name, table))
    failures = []
    for r in result.results:
        if r.success:
            continue
        cfg = r.expectation_config
        what = cfg.kwargs.get("column") or cfg.description or cfg.type
        count = (r.result or {}).get("unexpected_count", (r.result or {}).get("observed_value"))
        failures.append(f"{cfg.type}({what}): {count} unexpected")
    return ValidationResult(name, df.count(), bool(result.success), tuple(failures))
