"""The README's first command runs for real and reaches its summary."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_runs_end_to_end_and_summarises_every_broker():
    out = subprocess.run([sys.executable, "-m", "kmon.cli", "demo", "--messages", "3000"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for step in range(1, 8):
        assert f"[{step}/7]" in text, f"progress step {step} missing:\n{text}"
    rows = re.findall(r"^\s+(\d)\s+(Produce|Fetch)\s+([\d,]+)\s+[\d.]+", text, re.M)
    assert {(b, api) for b, api, _ in rows} == {(b, a) for b in "123" for a in ("Produce", "Fetch")}
    assert all(int(n.replace(",", "")) > 0 for _, _, n in rows)
    silver = int(re.search(r"silver\.request_stages\s+([\d,]+) rows", text).group(1).replace(",", ""))
    bronze = int(re.search(r"bronze\.request_stages\s+([\d,]+) rows", text).group(1).replace(",", ""))
    assert silver > 0 and silver <= bronze
    assert "orders in Delta via the Kafka source: 3,000 of 3,000" in text
    assert "cluster 'demo' stopped" in out.stderr
