"""The README's first-look commands, run verbatim from the repository root.

CI runs the suite in a fresh clone (`.ci/run`), so these run there exactly as a new user
would type them. (`./kmonw test` is this suite itself; `./kmonw demo` is run in its short
mode by test_demo.py.)
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kmon.config import REPO_ROOT

pytestmark = pytest.mark.timeout(1900)


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"<!-- readme-commands:begin -->\s*```sh\n(.*?)```\s*"
                      r"<!-- readme-commands:end -->", text, re.S)
    assert block, "README lost its readme-commands block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_first_look_commands_run_as_written():
    commands = readme_commands()
    assert commands[0] == "./kmonw demo --replay"
    outputs = []
    for line in commands:
        done = subprocess.run(["bash", "-c", line], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    replay, sql = outputs
    assert re.search(r"\| slow broker[^|]*\| yes", replay), replay[-4000:]
    assert "unclean_election" in sql and "ledger-0" in sql, sql[-3000:]
