"""kmon's layers, declared once, and a walk over every import that keeps them.

A module may import its own package and any package on a lower floor, never one on its
own floor or above. Every import counts: top-level, inside functions, under
TYPE_CHECKING. The floors, from the bottom (docs/architecture.md draws them):

1. core         the shared contract: finding types, severities, statuses, the finding
                model, configuration-key declaration; imports nothing of kmon
2. schemas      table schemas, declared once
3. infra        adapters: lake paths and catalog, Spark session, JVM jars, Kafka client
                settings, the local cluster, preflight checks
4. ingest       edge agents and parsers
   detectors    pure rules (no Spark, no I/O)
   dashboards   Grafana dashboards as code
5. jobs         the streaming pipeline: Spark queries, bronze, silver, gold, maintenance
6. evaluation   the detectors' side: their inputs read from the lake, the evaluation
                loop, the detector query and the findings table
7. remediation  findings in, guarded actions out
   reports      incident reports
8. kmon         the application: config assembly, the run loop, the exporter
9. demo         `kmon demo`: runner, workload, faults, capture/replay
10. matrix      `kmon matrix`: fault scenarios with ground truth, their live runs,
                the recorded corpus and its replay (built on demo's runner and faults)
11. cli         the command line, over everything

bench/ and tests/ stand outside the floors (they may import anything); nothing on a
floor imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

FLOORS: list[tuple[str, ...]] = [
    ("core",),
    ("schemas",),
    ("infra",),
    ("ingest", "detectors", "dashboards"),
    ("jobs",),
    ("evaluation",),
    ("remediation", "reports"),
    ("kmon",),
    ("demo",),
    ("matrix",),
    ("cli",),
]
OUTSIDE = ("tests", "bench")
# Packages of one floor that build on one another, one way: the key may import the values'
# packages, never the reverse (detectors/slow_client judges the slow-broker windows).
ONE_WAY = {"detectors.slow_client": ("detectors.slow_broker",)}


def floor_of(module: str) -> tuple[int, str] | None:
    """(floor, unit) of a dotted module name, the longest declared prefix winning."""
    best: tuple[int, str] | None = None
    for i, units in enumerate(FLOORS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                if best is None or len(unit) > len(best[1]):
                    best = (i, unit)
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import in the tree, relative ones resolved."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            # `from pkg import mod` imports pkg.mod when it is a module of kmon
            for a in node.names:
                out.append((node.lineno, f"{target}.{a.name}"))
    return out


def source_files() -> list[Path]:
    roots = {unit.split(".")[0] for units in FLOORS for unit in units}
    return sorted(p for r in roots for p in (REPO / r).rglob("*.py"))


def violations() -> list[str]:
    found: dict[tuple[str, int, str], str] = {}
    for path in source_files():
        module = module_name(path)
        own = floor_of(module)
        assert own is not None, f"{path} is on no floor: add its package to FLOORS"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in imported_modules(tree, module, path.name == "__init__.py"):
            top = target.split(".")[0]
            if top in OUTSIDE:
                found[(str(path), line, top)] = (f"{path.relative_to(REPO)}:{line}: imports "
                                                 f"{target} ({top}/ is outside the floors)")
                continue
            theirs = floor_of(target)
            if theirs is None or theirs[1] == own[1]:
                continue
            if theirs[0] >= own[0]:
                found.setdefault((str(path), line, theirs[1]), (
                    f"{path.relative_to(REPO)}:{line}: {own[1]} (floor {own[0] + 1}) imports "
                    f"{target} ({theirs[1]}, floor {theirs[0] + 1})"))
    return sorted(found.values())


def test_every_import_points_down_the_floors():
    bad = violations()
    assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


def test_packages_of_one_floor_import_one_way():
    bad = []
    for upper, lowers in ONE_WAY.items():
        for lower in lowers:
            for path in sorted((REPO / lower.replace(".", "/")).rglob("*.py")):
                module = module_name(path)
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
                bad += [f"{path.relative_to(REPO)}:{line}: imports {target}"
                        for line, target in imported_modules(tree, module,
                                                             path.name == "__init__.py")
                        if target == upper or target.startswith(upper + ".")]
    assert not bad, "imports against ONE_WAY:\n" + "\n".join(bad)


def test_the_walk_sees_imports_inside_functions(tmp_path):
    tree = ast.parse("def f():\n    from kmon.config import Config\n")
    assert (2, "kmon.config") in imported_modules(tree, "detectors.x", False)


def test_the_walk_resolves_relative_imports():
    tree = ast.parse("from . import lake\nfrom .lake import Lake\n")
    got = imported_modules(tree, "infra.spark_session", False)
    assert (1, "infra.lake") in got and (2, "infra.lake") in got


def test_floors_place_a_module_by_its_longest_prefix():
    assert floor_of("cli.main") == (10, "cli")
    assert floor_of("matrix.live") == (9, "matrix")
    assert floor_of("evaluation.inputs.tables") == (5, "evaluation")
    assert floor_of("kmon.config") == (7, "kmon")
    assert floor_of("detectors.slow_broker") == (3, "detectors")
    assert floor_of("detectors.slow_client") == (3, "detectors")
    assert floor_of("pyspark.sql") is None


def test_no_rule_module_imports_the_assembled_config():
    """The acceptance line of the layout: config is assembled at the top, never below."""
    for path in source_files():
        module = module_name(path)
        if module.split(".")[0] in ("kmon", "demo", "cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [t for _, t in imported_modules(tree, module, path.name == "__init__.py")]
        assert "kmon.config" not in names, f"{path.relative_to(REPO)} imports kmon.config"
