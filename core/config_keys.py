"""How a configuration key is declared: the primitives kmon.config and every component's
config section share (kept apart so components can declare sections without importing
the whole configuration, which imports them)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key and its source."""


def _key(doc: str, default: Any, *, min: float | None = None, max: float | None = None,
         choices: tuple | None = None) -> Any:
    meta = {"doc": doc, "min": min, "max": max, "choices": choices}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)
