"""Change-event schema: every poison kind is rejected with a reason, fuzzed input never escapes otherwise."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitoring.metrics import DEAD_LETTER_REASONS
from reranker.catalog.events import (
    MAX_ATTRIBUTE_LIST_ITEMS,
    MAX_ATTRIBUTES,
    MAX_DESCRIPTION_CHARS,
    MAX_EVENT_BYTES,
    MAX_ITEM_ID_CHARS,
    MAX_ITEM_TEXT_CHARS,
    MAX_TITLE_CHARS,
    ChangeEvent,
    InvalidEventError,
    ItemFields,
    decode_event,
    encode_event,
)

TS = "2024-05-01T12:00:00.250000Z"
FIELDS = {
    "title": "Acme UltraPhone 15 Pro 256GB",
    "attributes": {"storage": "256GB", "year": 2023},
    "description": "d",
}


def upsert(**overrides: object) -> dict[str, object]:
    event = {"op": "upsert", "item_id": "p-1", "version": 3, "timestamp": TS, "fields": dict(FIELDS)}
    event.update(overrides)
    return event


def with_fields(**overrides: object) -> dict[str, object]:
    return upsert(fields={**FIELDS, **overrides})


def raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


def reason_of(key: bytes | None, value: bytes) -> str:
    with pytest.raises(InvalidEventError) as info:
        decode_event(key, value)
    assert info.value.reason == str(info.value)
    assert info.value.code in DEAD_LETTER_REASONS
    return info.value.reason


def test_upsert_round_trips() -> None:
    event = decode_event(b"p-1", raw(upsert()))
    assert event.op == "upsert" and event.version == 3
    assert event.timestamp == datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)
    assert event.fields == ItemFields(**FIELDS)
    key, value = encode_event(event)
    assert key == b"p-1"
    assert decode_event(key, value) == event


def test_timestamp_offset_is_normalised_to_utc() -> None:
    event = decode_event(b"p-1", raw(upsert(timestamp="2024-05-01T14:00:00+02:00")))
    assert event.timestamp == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert event.timestamp.utcoffset() == timedelta(0)
    assert b'"timestamp":"2024-05-01T12:00:00.000000Z"' in encode_event(event)[1]


def test_delete_ignores_fields_and_unknown_keys_are_ignored() -> None:
    event = decode_event(b"p-1", raw(upsert(op="delete", fields={"junk": [1]}, schema="v9")))
    assert event.op == "delete" and event.fields is None
    assert b"fields" not in encode_event(event)[1]
    assert decode_event(*encode_event(event)) == event


def test_python_construction_drops_delete_fields() -> None:
    event = ChangeEvent(op="delete", item_id="x", version=0, timestamp=datetime.now(UTC), fields=FIELDS)
    assert event.fields is None


POISON = [
    ("invalid utf-8", b"p-1", b'{"op": "upsert\xff"}', "UTF-8"),
    ("truncated json", b"p-1", b'{"op": "upsert"', "invalid JSON"),
    ("empty value", b"p-1", b"", "invalid JSON"),
    ("NaN constant", b"p-1", b'{"version": NaN}', "NaN"),
    ("duplicate key", b"p-1", b'{"op": "upsert", "op": "delete"}', "duplicate key 'op'"),
    ("deep nesting", b"p-1", b"[" * 100_000, "nested too deeply"),
    ("array", b"p-1", b"[1, 2]", "JSON object"),
    ("string", b"p-1", b'"upsert"', "JSON object"),
    ("missing op", b"p-1", raw({k: v for k, v in upsert().items() if k != "op"}), "missing field 'op'"),
    ("missing item_id", b"p-1", raw({k: v for k, v in upsert().items() if k != "item_id"}), "'item_id'"),
    ("missing version", b"p-1", raw({k: v for k, v in upsert().items() if k != "version"}), "'version'"),
    (
        "missing timestamp",
        b"p-1",
        raw({k: v for k, v in upsert().items() if k != "timestamp"}),
        "'timestamp'",
    ),
    ("upsert without fields", b"p-1", raw({k: v for k, v in upsert().items() if k != "fields"}), "'fields'"),
    ("missing title", b"p-1", raw(upsert(fields={"attributes": {}, "description": ""})), "'fields.title'"),
    (
        "missing attributes",
        b"p-1",
        raw(upsert(fields={"title": "t", "description": ""})),
        "fields.attributes",
    ),
    ("unknown op", b"p-1", raw(upsert(op="merge")), "op: Input should be 'upsert' or 'delete'"),
    ("version as string", b"p-1", raw(upsert(version="3")), "version"),
    ("version as bool", b"p-1", raw(upsert(version=True)), "version"),
    ("version as float", b"p-1", raw(upsert(version=3.0)), "version"),
    ("negative version", b"p-1", raw(upsert(version=-1)), "version"),
    ("version over int64", b"p-1", raw(upsert(version=2**63)), "version"),
    ("item_id as int", b"1", raw(upsert(item_id=1)), "item_id"),
    ("empty item_id", b"", raw(upsert(item_id="")), "item_id"),
    ("item_id too long", b"p", raw(upsert(item_id="p" * (MAX_ITEM_ID_CHARS + 1))), "item_id"),
    ("item_id control char", b"p\n1", raw(upsert(item_id="p\n1")), "item_id: contains control"),
    ("item_id padded", b" p-1", raw(upsert(item_id=" p-1")), "item_id: has leading or trailing"),
    ("naive timestamp", b"p-1", raw(upsert(timestamp="2024-05-01T12:00:00")), "timestamp: has no UTC offset"),
    ("epoch timestamp", b"p-1", raw(upsert(timestamp=1714564800000)), "timestamp: must be an ISO-8601"),
    ("garbage timestamp", b"p-1", raw(upsert(timestamp="yesterday")), "is not ISO-8601"),
    ("timestamp overflow", b"p-1", raw(upsert(timestamp="0001-01-01T00:00:00+05:00")), "out of range"),
    ("fields not object", b"p-1", raw(upsert(fields=["t"])), "fields"),
    ("title as number", b"p-1", raw(with_fields(title=42)), "fields.title"),
    ("blank title", b"p-1", raw(with_fields(title="  ")), "fields.title: is blank"),
    ("title with NUL", b"p-1", raw(with_fields(title="a\x00b")), "fields.title: contains control"),
    (
        "lone surrogate",
        b"p-1",
        b'{"op":"upsert","item_id":"p-1","version":1,"timestamp":"'
        + TS.encode()
        + b'","fields":{"title":"t","attributes":{},"description":"\\ud800"}}',
        "fields.description",
    ),
    ("surrogate in attribute", b"p-1", raw(with_fields(attributes={"a": "\ud800"})), "U+D800"),
    (
        "attributes as list",
        b"p-1",
        raw(with_fields(attributes=[["a", 1]])),
        "attributes must be a JSON object",
    ),
    ("null attribute", b"p-1", raw(with_fields(attributes={"a": None})), "not null"),
    ("nested attribute", b"p-1", raw(with_fields(attributes={"a": {"b": 1}})), "not dict"),
    ("nested list attribute", b"p-1", raw(with_fields(attributes={"a": [[1]]})), "not list"),
    ("empty attribute name", b"p-1", raw(with_fields(attributes={"": 1})), "attribute name ''"),
    ("huge integer attribute", b"p-1", raw(with_fields(attributes={"a": 2**64})), "64-bit"),
    ("oversized title", b"p-1", raw(with_fields(title="t" * (MAX_TITLE_CHARS + 1))), "fields.title"),
    (
        "oversized description",
        b"p-1",
        raw(with_fields(description="d" * (MAX_DESCRIPTION_CHARS + 1))),
        "fields.description: String should have at most",
    ),
    ("oversized attribute value", b"p-1", raw(with_fields(attributes={"a": "v" * 1001})), "longer than"),
    (
        "too many attributes",
        b"p-1",
        raw(with_fields(attributes={f"k{i}": i for i in range(MAX_ATTRIBUTES + 1)})),
        f"more than {MAX_ATTRIBUTES} attributes",
    ),
    (
        "long attribute list",
        b"p-1",
        raw(with_fields(attributes={"a": list(range(MAX_ATTRIBUTE_LIST_ITEMS + 1))})),
        "list longer",
    ),
    (
        "oversized item text",
        b"p-1",
        raw(
            with_fields(
                description="d" * MAX_DESCRIPTION_CHARS, attributes={f"k{i}": "v" * 1000 for i in range(5)}
            )
        ),
        "item text",
    ),
    ("oversized event", b"p-1", b" " * (MAX_EVENT_BYTES + 1), "over the limit"),
    ("no key", None, raw(upsert()), "no key"),
    ("key mismatch", b"p-2", raw(upsert()), "does not match item_id"),
    ("key not utf-8", b"\xff", raw(upsert()), "key is not valid UTF-8"),
]


@pytest.mark.parametrize(("key", "value", "expected"), [p[1:] for p in POISON], ids=[p[0] for p in POISON])
def test_poison_event_is_rejected_with_reason(key: bytes | None, value: bytes, expected: str) -> None:
    assert expected in reason_of(key, value)


def test_tombstone_value_is_rejected() -> None:
    assert "tombstone" in reason_of(b"p-1", None)  # type: ignore[arg-type]


CODES = [
    ("tombstone", b"p-1", None),
    ("oversized", b"p-1", b" " * (MAX_EVENT_BYTES + 1)),
    ("invalid_utf8", b"p-1", b"\xff\xfe\x00binary"),
    ("invalid_json", b"p-1", b"{not json"),
    ("invalid_json", b"p-1", b"[1, 2]"),  # JSON, but not an object
    ("bad_key", None, raw(upsert())),
    ("bad_key", b"p-2", raw(upsert())),
    ("bad_key", b"\xff", raw(upsert())),
    ("schema", b"p-1", raw(upsert(op="merge"))),
    ("schema", b"p-1", raw(with_fields(title=""))),
]


@pytest.mark.parametrize(("code", "key", "value"), CODES)
def test_each_kind_of_problem_carries_its_dead_letter_code(
    code: str, key: bytes | None, value: bytes | None
) -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_event(key, value)  # type: ignore[arg-type]
    assert info.value.code == code


def test_largest_valid_event_fits_the_byte_limit() -> None:
    # 4-byte characters everywhere text is allowed, and the widest integers elsewhere: the limits are
    # consistent only if everything the schema accepts also encodes under MAX_EVENT_BYTES.
    wide = "😀"
    text_attrs = {f"t{i}": wide * 1000 for i in range(3)}
    int_attrs = {f"n{i}": [-(2**63)] * MAX_ATTRIBUTE_LIST_ITEMS for i in range(MAX_ATTRIBUTES - 3)}
    used = 3 * (2 + 1000) + sum(len(k) for k in int_attrs)
    fields = ItemFields(
        title=wide * MAX_TITLE_CHARS,
        attributes={**text_attrs, **int_attrs},
        description=wide * (MAX_ITEM_TEXT_CHARS - MAX_TITLE_CHARS - used),
    )
    event = ChangeEvent(
        op="upsert",
        item_id=wide * MAX_ITEM_ID_CHARS,
        version=2**63 - 1,
        timestamp=datetime.now(UTC),
        fields=fields,
    )
    key, value = encode_event(event)
    assert len(value) <= MAX_EVENT_BYTES
    assert decode_event(key, value) == event


def assert_decodes_or_rejects(key: bytes | None, value: bytes) -> None:
    """The documented contract: a valid event that round-trips, or InvalidEventError; nothing else."""
    try:
        event = decode_event(key, value)
    except InvalidEventError as exc:
        assert exc.reason and exc.code in DEAD_LETTER_REASONS
        return
    assert isinstance(event, ChangeEvent)
    again_key, again_value = encode_event(event)
    assert again_key == event.item_id.encode()
    assert decode_event(again_key, again_value) == event


FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(key=st.none() | st.binary(max_size=16), value=st.binary(max_size=512))
def test_fuzz_arbitrary_bytes(key: bytes | None, value: bytes) -> None:
    assert_decodes_or_rejects(key, value)


valid_text = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=40)
zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=14))])
valid_events = st.builds(
    ChangeEvent,
    op=st.sampled_from(["upsert", "delete"]),
    item_id=valid_text.map(str.strip).filter(bool),
    version=st.integers(min_value=0, max_value=2**63 - 1),
    timestamp=st.datetimes(timezones=zones),
    fields=st.builds(
        ItemFields,
        title=valid_text.filter(str.strip),
        attributes=st.dictionaries(
            valid_text.map(str.strip).filter(bool),
            st.booleans()
            | st.integers(min_value=-(2**63), max_value=2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False)
            | valid_text,
            max_size=5,
        ),
        description=valid_text,
    ),
)


@FUZZ
@given(event=valid_events)
def test_valid_events_round_trip(event: ChangeEvent) -> None:
    key, value = encode_event(event)
    assert decode_event(key, value) == event


# Near-valid input finds more than random dicts (which almost never get past the first missing key):
# start from a valid event and delete or replace a few values with arbitrary JSON, surrogates included.
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
junk = (
    json_values
    | st.integers(min_value=-2, max_value=2**64)
    | st.datetimes(timezones=zones | st.none()).map(datetime.isoformat)
    | st.sampled_from(["upsert", "delete", "", " ", "\x00"])
)
PATHS = [
    ("op",), ("item_id",), ("version",), ("timestamp",), ("fields",), ("extra",), ("fields", "title"),
    ("fields", "attributes"), ("fields", "description"), ("fields", "attributes", "k"),
]  # fmt: skip


@st.composite
def mutated_events(draw: st.DrawFn) -> tuple[dict[str, object], str]:
    event = draw(valid_events)
    obj = json.loads(encode_event(event)[1])
    for path, remove, value in draw(
        st.lists(st.tuples(st.sampled_from(PATHS), st.booleans(), junk), max_size=3)
    ):
        parent = obj
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            if remove:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
    return obj, event.item_id


@FUZZ
@given(
    mutated=mutated_events(), key_kind=st.sampled_from(["item_id", "none", "other"]), ascii_only=st.booleans()
)
def test_fuzz_mutated_events(mutated: tuple[dict[str, object], str], key_kind: str, ascii_only: bool) -> None:
    obj, original_id = mutated
    key = {"item_id": original_id.encode(), "none": None, "other": b"other"}[key_kind]
    # ensure_ascii=False cannot write lone surrogates as UTF-8; the escaped form still reaches the decoder.
    try:
        value = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8")
    except UnicodeEncodeError:
        value = json.dumps(obj).encode("utf-8")
    assert_decodes_or_rejects(key, value)
