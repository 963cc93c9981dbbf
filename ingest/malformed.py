"""What a parser returns instead of a record when its input cannot be trusted.

Every edge parser either returns a flat record (a dict whose keys are the silver table's
columns) or a `Malformed` carrying a short machine reason and the raw input, so the caller
can quarantine it (schemas/quarantine.py). Nothing is dropped silently: the only inputs
for which a parser returns `None` are documented skips (for example group metadata keys in
``__consumer_offsets``), and those come with a `Skipped` reason too.

Reasons are short and stable, so quarantine can be grouped by them: a bare word
("truncated_json", "unknown_api", "oversize_line", "not_utf8", "empty_line") or a word and
the field it concerns ("missing_field:totalTimeMs", "negative_time:localTimeMs",
"wrong_type:requestApiVersion").

A parser is meant to return, never raise; when one raises anyway (a bug, or input no test
foresaw), the agent quarantines that one input with `parser_exception` rather than crash
and read the same input again after every restart. Its reason is the one kind with a
free-text tail: ``parser_exception:<exception type>: <message>`` (the message cut to
`EXCEPTION_MESSAGE_MAX_CHARS`); group such rows by the part before the first ``": "``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Quarantine keeps at most this many characters of the raw input: enough to see what went
# wrong, bounded so one huge bad Fetch line cannot blow up a micro-batch.
RAW_MAX_CHARS = 16 * 1024
# A parser_exception reason keeps this much of the exception's message.
EXCEPTION_MESSAGE_MAX_CHARS = 200


@dataclass(frozen=True, slots=True)
class Malformed:
    """Input a parser could not turn into a record, with why."""

    source: str          # which parser: request_log, broker_log, client_log, consumer_offsets, ...
    reason: str          # short machine reason, see the module docstring
    raw: str | bytes     # the input as received (bytes for binary sources)
    ts_ms: int | None = None  # event time, when the parser got that far

    def __bool__(self) -> bool:  # a Malformed is never mistaken for a record in `if rec:`
        return False

    def to_quarantine_record(self, *, cluster: str, ingest_ts_ms: int, broker: int | None = None,
                             origin: str | None = None, source_partition: int | None = None,
                             source_offset: int | None = None) -> dict:
        """The row for the quarantine table (schemas/quarantine.py), raw text bounded."""
        text, encoding, size = raw_as_text(self.raw)
        return {
            "cluster": cluster,
            "broker": broker,
            "source": self.source,
            "reason": self.reason,
            "raw": text[:RAW_MAX_CHARS],
            "raw_encoding": encoding,
            "raw_bytes_len": size,
            "raw_truncated": len(text) > RAW_MAX_CHARS,
            "ts_ms": self.ts_ms,
            "ingest_ts_ms": ingest_ts_ms,
            "origin": origin,
            "source_partition": source_partition,
            "source_offset": source_offset,
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """Input that is valid but deliberately not turned into a record (a documented skip)."""

    source: str
    reason: str

    def __bool__(self) -> bool:
        return False


def parser_exception(source: str, error: BaseException, raw: str | bytes,
                     ts_ms: int | None = None) -> Malformed:
    """The input whose parsing (or record building) raised `error`, ready for quarantine.

    Reason ``parser_exception:<type>: <message>``: the message on one line, cut to
    `EXCEPTION_MESSAGE_MAX_CHARS`, lone surrogates escaped so the row can be encoded.
    """
    kind = f"parser_exception:{type(error).__name__}"
    try:
        message = " ".join(str(error).split())
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails still gets its type
        message = ""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(message) > EXCEPTION_MESSAGE_MAX_CHARS:
        message = message[:EXCEPTION_MESSAGE_MAX_CHARS - 3] + "..."
    return Malformed(source, f"{kind}: {message}" if message else kind, raw, ts_ms)


def checked_text(raw: str | bytes | bytearray | memoryview, source: str,
                 max_chars: int) -> tuple[str, str] | Malformed:
    """The guard every text parser starts with: decode, reject empty and oversize input.

    Returns (the decoded input, the input without its line ending), or a Malformed with
    not_utf8, empty_line or oversize_line. Text given as str that has no UTF-8 form (a lone
    surrogate) is not_utf8 too: no sink could encode a record holding it.
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return Malformed(source, "not_utf8", bytes(raw))
    elif not raw.isascii():
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            return Malformed(source, "not_utf8", raw.encode("utf-8", "surrogatepass"))
    text = raw.rstrip("\r\n") if raw.endswith(("\n", "\r")) else raw
    if not text or text.isspace():
        return Malformed(source, "empty_line", raw)
    if len(text) > max_chars:
        return Malformed(source, "oversize_line", raw)
    return raw, text


def json_error_reason(error: json.JSONDecodeError, text: str) -> str:
    """truncated_json when the document stopped early, invalid_json when it is damaged."""
    stopped_early = (error.pos >= len(text.rstrip()) - 1
                     or error.msg.startswith("Unterminated string"))
    return "truncated_json" if stopped_early else "invalid_json"


def raw_as_text(raw: str | bytes | None) -> tuple[str, str, int]:
    """(text, encoding, size in bytes): UTF-8 text as is, anything else as hex."""
    if raw is None:
        return "", "utf8", 0
    if isinstance(raw, str):
        try:
            return raw, "utf8", len(raw.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates have no UTF-8: hex, as other non-text
            data = raw.encode("utf-8", "surrogatepass")
            return data.hex(), "hex", len(data)
    try:
        return bytes(raw).decode("utf-8"), "utf8", len(raw)
    except UnicodeDecodeError:
        return bytes(raw).hex(), "hex", len(raw)


# Reason prefix of a span of input an agent skipped because it could not read it back.
LOST_SPAN = "lost_span"


def lost_span(source: str, cause: str, lost_from: dict, resumed_at: dict,
              lost: int | None = None) -> Malformed:
    """A span of input that is gone, ready for quarantine: reason ``lost_span:<cause>``.

    `raw` is a JSON text ``{"from": ..., "to": ..., "lost": n}``: where reading stopped,
    where it resumed, and how much lies between when the agent can tell (offsets of a
    topic); a file's lost bytes are unknown, so files leave ``lost`` out.
    """
    span = {"from": lost_from, "to": resumed_at}
    if lost is not None:
        span["lost"] = lost
    return Malformed(source, f"{LOST_SPAN}:{cause}", json.dumps(span, separators=(",", ":")))
