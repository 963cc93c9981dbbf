"""One scrape of a kmon exporter (``kmon run``'s or an agent's ``/metrics``), parsed by
prometheus_client's own text parser: what the fault benches sample as "what an operator
sees"."""

from __future__ import annotations

import http.client
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int, names: tuple[str, ...]) -> list[tuple[str, dict, float]] | str:
    """(name, labels, value) of every sample of `names` at 127.0.0.1:`port`/metrics; the
    error as text when the exporter does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except (OSError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {e}"
    return [(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in names]


def series(name: str, labels: dict) -> str:
    """A sample's series as the exposition writes it: ``name{a="1",b="2"}``."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name
