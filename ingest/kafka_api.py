"""A request-log header's API: the numeric key and the upper-snake name mapped to the
canonical name (core/kafka_apis.py holds the table).

The request log names an API in upper snake case (``requestApiKeyName`` "API_VERSIONS",
the enum constant); `canonical_api` maps either form to the JMX name.
"""

from __future__ import annotations

import re

from core.kafka_apis import API_NAMES

__all__ = ["API_KEYS_BY_UPPER", "API_NAMES", "FETCH", "PRODUCE", "ApiMismatch", "camel",
           "canonical_api", "upper_snake"]

PRODUCE = 0
FETCH = 1

_UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
_CAMEL_WORD = re.compile(r"[A-Z][a-z0-9]*")


def upper_snake(name: str) -> str:
    """"ApiVersions" -> "API_VERSIONS", the form of the enum constant."""
    return "_".join(w.upper() for w in _CAMEL_WORD.findall(name))


def camel(key_name: str) -> str:
    """"API_VERSIONS" -> "ApiVersions"."""
    return "".join(w.capitalize() for w in key_name.split("_"))


API_KEYS_BY_UPPER: dict[str, int] = {upper_snake(n): k for k, n in API_NAMES.items()}


class ApiMismatch(ValueError):
    """The numeric key and the name in one header disagree."""


def canonical_api(api_key: int | None, key_name: str | None) -> tuple[int, str] | None:
    """(api key, JMX name) from a header's numeric key and/or its upper-snake name.

    A key from the table wins; a name alone is looked up. An API newer than the table
    (a well-formed name with an unknown key) is named from its enum constant, so a newer
    broker's requests are kept rather than quarantined. None when neither tells which API;
    `ApiMismatch` when the key and the name name different APIs.
    """
    if api_key is not None and api_key in API_NAMES:
        name = API_NAMES[api_key]
        if key_name is not None and key_name != upper_snake(name):
            raise ApiMismatch(f"{api_key} is {name}, not {key_name}")
        return api_key, name
    if key_name is None or not _UPPER_SNAKE.fullmatch(key_name):
        return None
    known = API_KEYS_BY_UPPER.get(key_name)
    if known is not None:
        if api_key is not None and api_key != known:
            raise ApiMismatch(f"{key_name} is {known}, not {api_key}")
        return known, API_NAMES[known]
    if api_key is None or api_key < 0:
        return None
    return api_key, camel(key_name)
