"""Loading the captured telemetry under tests/fixtures/ (see tests/fixtures/README.md).

Fixture files hold the lines exactly as captured or written; lines starting with ``#`` are
comments saying where the lines below them come from, and are left out here.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_lines(relative: str) -> list[str]:
    """The lines of a fixture file, comments left out, without line endings."""
    text = (FIXTURES / relative).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if not line.startswith("#")]


def fixture_json(relative: str) -> list:
    """The JSON documents of a one-document-per-line fixture file."""
    return [json.loads(line) for line in fixture_lines(relative) if line.strip()]


def line_containing(relative: str, needle: str) -> str:
    """The one fixture line that contains `needle` (a test names its line by content)."""
    hits = [line for line in fixture_lines(relative) if needle in line]
    if len(hits) != 1:
        raise LookupError(f"{len(hits)} lines of {relative} contain {needle!r}")
    return hits[0]
