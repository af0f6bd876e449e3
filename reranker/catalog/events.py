"""Catalog change events: the schema, and the only decoder/encoder for the change topic.

Wire format: Kafka key = the item id (UTF-8), value = one JSON object

    {"op": "upsert", "item_id": "p-1", "version": 7, "timestamp": "2024-05-01T12:00:00.000000Z",
     "fields": {"title": "...", "attributes": {"storage": "256GB"}, "description": "..."}}

* `version` is the catalog's change sequence number (see `reranker.catalog.database`): per item it only
  grows, so a consumer must never let an event replace state with a higher version.
* `timestamp` is an ISO-8601 string with an explicit UTC offset ("Z" or "+02:00"); naive times are
  rejected because Feast orders writes by event time and a guessed zone would reorder them. Decoded
  timestamps are normalised to UTC. (Epoch numbers are rejected rather than guessed as s or ms.)
* `fields` carries the item's full state, never a delta, so a consumer can render the item without
  reading the catalog. Required for upsert; ignored (and dropped) for delete.
* `refresh` (optional, default false) marks a request from a serving replica that found no usable row for
  the item and recomputed it on the request path: the replica publishes the catalog's current state of
  the item with `"refresh": true` instead of writing the store itself, so the consumer group stays the
  only writer. The consumer then recompresses unless the store already holds a usable row at this
  version or a newer one.
* Unknown top-level or `fields` keys are ignored, so producers can add keys without sending every
  older consumer's traffic to the dead-letter topic.

Every problem with received bytes surfaces as `InvalidEventError` (a `ValueError`): a one-line
`reason` for people and a `code` from a small fixed set for the dead-letter record and its metric
label.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

MAX_EVENT_BYTES = 512 * 1024
MAX_ITEM_ID_CHARS = 256
MAX_TITLE_CHARS = 1_000
MAX_DESCRIPTION_CHARS = 60_000
MAX_ATTRIBUTES = 64
MAX_ATTRIBUTE_KEY_CHARS = 64
MAX_ATTRIBUTE_VALUE_CHARS = 1_000
MAX_ATTRIBUTE_LIST_ITEMS = 32
# Bound on title + description + attribute keys and string values together. With the integer bounds
# below it keeps every valid event's encoding under MAX_EVENT_BYTES (4 UTF-8 bytes per char at most).
MAX_ITEM_TEXT_CHARS = 64_000
MAX_VERSION = 2**63 - 1
MAX_TIMESTAMP_CHARS = 64
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

# C0/C1 control characters and lone surrogates (which JSON "\ud800" escapes can smuggle in and which
# cannot be encoded back to UTF-8). Free text may keep tab and line breaks; identifiers may not.
_BAD_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_BAD_IN_ID = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class InvalidEventError(ValueError):
    """A change event that cannot be accepted; `reason` says why in one line, `code` names the kind of
    problem: tombstone, oversized, invalid_utf8, invalid_json, bad_key or schema (both go to the
    dead-letter record; `code` is also its metric label, one of monitoring.metrics.DEAD_LETTER_REASONS)."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def _check_text(value: str) -> str:
    if match := _BAD_IN_TEXT.search(value):
        raise ValueError(f"contains control or surrogate character U+{ord(match.group()):04X}")
    return value


def _check_identifier(value: str) -> str:
    if match := _BAD_IN_ID.search(value):
        raise ValueError(f"contains control or surrogate character U+{ord(match.group()):04X}")
    if value != value.strip():
        raise ValueError("has leading or trailing whitespace")
    return value


def _check_title(value: str) -> str:
    if not value.strip():
        raise ValueError("is blank")
    return value


def _check_scalar(key: str, value: object) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueError(f"attribute {key!r}: integer outside the 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"attribute {key!r}: number is not finite")
    elif isinstance(value, str):
        if len(value) > MAX_ATTRIBUTE_VALUE_CHARS:
            raise ValueError(f"attribute {key!r}: value longer than {MAX_ATTRIBUTE_VALUE_CHARS} characters")
        try:
            _check_text(value)
        except ValueError as exc:
            raise ValueError(f"attribute {key!r}: value {exc}") from None
    else:
        kind = "null" if value is None else type(value).__name__
        raise ValueError(
            f"attribute {key!r}: value must be a string, number, boolean or a list of them, not {kind}"
        )


def _check_attributes(value: object) -> dict[str, Any]:
    """A flat JSON object: keys are short one-line names, values scalars or lists of scalars."""
    if not isinstance(value, dict):
        raise ValueError("attributes must be a JSON object")
    if len(value) > MAX_ATTRIBUTES:
        raise ValueError(f"more than {MAX_ATTRIBUTES} attributes")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_ATTRIBUTE_KEY_CHARS:
            raise ValueError(f"attribute name {key!r} must be 1..{MAX_ATTRIBUTE_KEY_CHARS} characters")
        try:
            _check_identifier(key)
        except ValueError as exc:
            raise ValueError(f"attribute name {key!r} {exc}") from None
        if isinstance(item, list):
            if len(item) > MAX_ATTRIBUTE_LIST_ITEMS:
                raise ValueError(f"attribute {key!r}: list longer than {MAX_ATTRIBUTE_LIST_ITEMS} items")
            for part in item:
                _check_scalar(key, part)
        else:
            _check_scalar(key, item)
    return dict(value)


def _parse_timestamp(value: object) -> datetime:
    if isinstance(value, str):
        if len(value) > MAX_TIMESTAMP_CHARS:
            raise ValueError("is too long")
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not ISO-8601") from None
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise ValueError("must be an ISO-8601 string with a UTC offset")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError("has no UTC offset (naive times are ambiguous)")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None


Title = Annotated[
    str,
    Field(strict=True, max_length=MAX_TITLE_CHARS),
    AfterValidator(_check_text),
    AfterValidator(_check_title),
]
Description = Annotated[
    str, Field(strict=True, max_length=MAX_DESCRIPTION_CHARS), AfterValidator(_check_text)
]
ItemId = Annotated[
    str, Field(strict=True, min_length=1, max_length=MAX_ITEM_ID_CHARS), AfterValidator(_check_identifier)
]
Version = Annotated[int, Field(strict=True, ge=0, le=MAX_VERSION)]
Timestamp = Annotated[datetime, BeforeValidator(_parse_timestamp)]


class ItemFields(BaseModel):
    """An item's full content: what the renderer turns into the text that is compressed."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    title: Title
    attributes: Annotated[dict[str, Any], BeforeValidator(_check_attributes)]
    description: Description

    @model_validator(mode="after")
    def _bound_total_text(self) -> ItemFields:
        total = len(self.title) + len(self.description)
        for key, value in self.attributes.items():
            parts = value if isinstance(value, list) else [value]
            total += len(key) + sum(len(p) for p in parts if isinstance(p, str))
        if total > MAX_ITEM_TEXT_CHARS:
            raise ValueError(f"item text is {total} characters, over the limit of {MAX_ITEM_TEXT_CHARS}")
        return self


class ChangeEvent(BaseModel):
    """One catalog change, as published on the change topic."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    op: Literal["upsert", "delete"]
    item_id: ItemId
    version: Version
    timestamp: Timestamp
    fields: ItemFields | None = None
    refresh: Annotated[bool, Field(strict=True)] = False

    @model_validator(mode="before")
    @classmethod
    def _drop_fields_of_delete(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("op") == "delete":
            return {k: v for k, v in data.items() if k != "fields"}
        return data

    @model_validator(mode="after")
    def _upsert_has_fields(self) -> ChangeEvent:
        if self.op == "upsert" and self.fields is None:
            raise ValueError("an upsert event needs 'fields' (title, attributes, description)")
        return self


def validation_reason(exc: ValidationError, limit: int = 3) -> str:
    """One line naming each problem with its location, e.g. "fields.title: String should have ..."."""
    parts = []
    for err in exc.errors(include_url=False)[:limit]:
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "missing":
            parts.append(f"missing field {loc!r}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
    if exc.error_count() > limit:
        parts.append(f"(+{exc.error_count() - limit} more)")
    return "; ".join(parts)


def strict_json_loads(text: str) -> object:
    """`json.loads` that refuses NaN/Infinity and duplicate keys (both read differently elsewhere).

    Raises ValueError (including for nesting too deep to parse) and nothing else.
    """
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def decode_event(key: bytes | None, value: bytes) -> ChangeEvent:
    """Validate one change-topic record. Raises `InvalidEventError`, never anything else, on bad input."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidEventError(
            f"value must be bytes, got {type(value).__name__} (a tombstone?)", "tombstone"
        )
    if len(value) > MAX_EVENT_BYTES:
        raise InvalidEventError(
            f"event is {len(value)} bytes, over the limit of {MAX_EVENT_BYTES}", "oversized"
        )
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEventError(f"value is not valid UTF-8 (byte {exc.start})", "invalid_utf8") from None
    try:
        data = strict_json_loads(text)
    except ValueError as exc:
        raise InvalidEventError(f"invalid JSON: {exc}", "invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidEventError(f"event must be a JSON object, got {type(data).__name__}", "invalid_json")
    try:
        event = ChangeEvent.model_validate(data)
    except ValidationError as exc:
        raise InvalidEventError(validation_reason(exc), "schema") from None
    _check_key(key, event.item_id)
    return event


def _check_key(key: bytes | None, item_id: str) -> None:
    # Per-item ordering holds only within a partition, and the partition comes from the key.
    if key is None:
        raise InvalidEventError("record has no key; the key must be the item_id", "bad_key")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise InvalidEventError(f"key must be bytes, got {type(key).__name__}", "bad_key")
    try:
        key_text = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEventError("key is not valid UTF-8", "bad_key") from None
    if key_text != item_id:
        raise InvalidEventError(f"key {key_text[:80]!r} does not match item_id {item_id[:80]!r}", "bad_key")


def format_timestamp(moment: datetime) -> str:
    """The wire form: UTC, microseconds, "Z" suffix (isoformat, so years < 1000 keep four digits)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def encode_event(event: ChangeEvent) -> tuple[bytes, bytes]:
    """(key, value) for the change topic; `decode_event` of the result gives back an equal event."""
    body: dict[str, Any] = {
        "op": event.op,
        "item_id": event.item_id,
        "version": event.version,
        "timestamp": format_timestamp(event.timestamp),
    }
    if event.fields is not None:
        body["fields"] = event.fields.model_dump()
    if event.refresh:
        body["refresh"] = True
    value = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return event.item_id.encode("utf-8"), value.encode("utf-8")
