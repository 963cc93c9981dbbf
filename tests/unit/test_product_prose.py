"""Product prose ages well: no docstring, comment, string or key help in the product code
names a dated run, a commit, a work session or a recorded corpus scenario. The run that
showed a case belongs in its scenario row, its corpus manifest or the unit test that pins
the rule; the product keeps the rule and its general reason.

matrix/, bench/, demo/ and tests/ are exempt: the matrix catalog is where scenarios live.
"""

import io
import re
import subprocess
import tokenize

import pytest

from kmon.config import REPO_ROOT

pytestmark = pytest.mark.unit

PRODUCT_DIRS = ("detectors", "jobs", "conf", "core", "infra", "kmon", "ingest", "schemas",
                "remediation", "reports", "dashboards", "cli")

RUN_STAMP = re.compile(r"\b20\d{6}T\d{6}Z\b")
# 7-40 lowercase hex characters with at least one digit and one letter, as a whole word.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
SESSION = re.compile(r"\bsession \d+\b", re.IGNORECASE)

_CAPTURED_RECORD = "a captured __consumer_offsets record, in hex, that the parser documents"
_INCIDENT_ID = "an incident id in `kmon report`'s usage example"
# Hex words that are data, not commits: (path, word) -> why.
HEX_ALLOWED = {
    ("ingest/consumer_offsets.py", "756e636c65616e2d74"): _CAPTURED_RECORD,
    ("ingest/consumer_offsets.py", "000001a202d72915"): _CAPTURED_RECORD,
    ("ingest/consumer_offsets.py", "bf609c3631f343ea8774f2e20c0d5c87"): _CAPTURED_RECORD,
    ("reports/cli.py", "3f9c0a1be2d4c5f6a7b8c9d0"): _INCIDENT_ID,
}
# Scenario names used as a name, not as a reason: (path, text around it) -> why.
SCENARIO_ALLOWED = {
    ("cli/main.py", "kmon matrix run --scenarios freeze-short-3b"):
        "a usage example in `kmon matrix`'s help",
}


def _scenarios() -> list[str]:
    corpus = REPO_ROOT / "tests" / "corpus"
    return sorted(p.name for p in corpus.iterdir() if (p / "manifest.json").exists())


def _product_files() -> list[str]:
    """The product files of the work tree: tracked or new (not ignored), not deleted."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--",
                          *PRODUCT_DIRS], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True).stdout
    return sorted({p for p in out.splitlines()
                   if p.endswith((".py", ".toml")) and (REPO_ROOT / p).exists()})


def _prose(path: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment and string in a Python file; every line of any
    other file (TOML is all keys, values and help)."""
    text = (REPO_ROOT / path).read_text()
    if not path.endswith(".py"):
        return list(enumerate(text.splitlines(), start=1))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            for i, line in enumerate(tok.string.splitlines()):
                out.append((tok.start[0] + i, line))
    return out


def findings() -> list[str]:
    scenario = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, _scenarios()))
                          + r")(?![\w-])")
    found = []
    for path in _product_files():
        for lineno, line in _prose(path):
            where = f"{path}:{lineno}: {line.strip()}"
            if RUN_STAMP.search(line):
                found.append(f"run stamp  {where}")
            for word in COMMIT.findall(line):
                if (path, word) not in HEX_ALLOWED:
                    found.append(f"commit {word}  {where}")
            if SESSION.search(line):
                found.append(f"session  {where}")
            for name in scenario.findall(line):
                if not any(p == path and name in text and text in line
                           for p, text in SCENARIO_ALLOWED):
                    found.append(f"scenario {name}  {where}")
    return found


def test_scenarios_are_known():
    assert len(_scenarios()) >= 20, "tests/corpus/ should hold the recorded scenarios"


def test_product_prose_names_no_run_commit_session_or_scenario():
    found = findings()
    assert not found, ("product prose names a run, commit, session or corpus scenario; keep "
                       "the rule and its reason, move the case to a test or the scenario "
                       "row:\n" + "\n".join(found))
