"""reranker/serving/requests.py: decoding and validating the QUERY / ITEM_IDS tensors of a request."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bytes_array
from hypothesis import given, settings
from hypothesis import strategies as st

from reranker.serving.requests import MAX_QUERY_BYTES, RequestError, RerankRequest, decode_request

GOOD_IDS = bytes_array([b"item-0", b"item-1"])


@pytest.mark.parametrize(
    ("query", "ids", "message"),
    [
        (None, GOOD_IDS, "missing input QUERY"),
        (bytes_array([b"q"]), None, "missing input ITEM_IDS"),
        (bytes_array([b""]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b" \t\n"]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b"q", b"r"]), GOOD_IDS, "QUERY must hold exactly one string"),
        (bytes_array([]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b"q"]).reshape(1, 1), GOOD_IDS, "QUERY must have shape [n]"),
        (np.array([1.0], dtype=np.float32), GOOD_IDS, "QUERY must be BYTES"),
        (bytes_array([b"\xff\xfe"]), GOOD_IDS, "QUERY is not valid UTF-8 (byte 0)"),
        (bytes_array(["\ud800"]), GOOD_IDS, "QUERY is not valid UTF-8 text"),
        (bytes_array([b"x" * (MAX_QUERY_BYTES + 1)]), GOOD_IDS, f"over the limit of {MAX_QUERY_BYTES}"),
        (bytes_array([7]), GOOD_IDS, "QUERY must be BYTES (UTF-8 text), got int"),
        (bytes_array([b"q"]), bytes_array([]), "ITEM_IDS is empty"),
        (bytes_array([b"q"]), bytes_array([b"a"] * 6), "ITEM_IDS has 6 elements, more than the limit of 5"),
        (bytes_array([b"q"]), GOOD_IDS.reshape(2, 1), "ITEM_IDS must have shape [n] (1-D), got shape [2, 1]"),
        (bytes_array([b"q"]), bytes_array([b"ok", b"\xc3"]), "ITEM_IDS[1] is not valid UTF-8 (byte 0)"),
        (bytes_array([b"q"]), bytes_array([b"ok", b""]), "ITEM_IDS[1]"),
        (bytes_array([b"q"]), bytes_array([b"a\x00b"]), "ITEM_IDS[0]: contains control"),
        (bytes_array([b"q"]), bytes_array([b"x" * 257]), "ITEM_IDS[0]"),
        (bytes_array([b"q"]), np.array([1, 2]), "ITEM_IDS must be BYTES, got int64"),
        (bytes_array([b"q"]), [b"a"], "ITEM_IDS must be a tensor, got list"),
    ],
)
def test_malformed_requests_get_precise_errors(query, ids, message: str) -> None:
    with pytest.raises(RequestError) as err:
        decode_request(query, ids, max_candidates=5)
    assert message in str(err.value)


def test_valid_request_decodes() -> None:
    got = decode_request(
        bytes_array(["téléphone 256GB".encode()]), bytes_array([b"item-1", "item-1", b"x"]), 5
    )
    assert got == RerankRequest("téléphone 256GB", ("item-1", "item-1", "x"))
    # numpy's fixed-width bytes / str arrays are accepted as well
    got = decode_request(np.array([b"q"]), np.array(["a", "b"]), 5)
    assert got == RerankRequest("q", ("a", "b"))


_element = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12),
    st.sampled_from([b"item-0", b" ", b"\xff", "\ud800", b"a\nb"]),
    st.integers(),
    st.none(),
    st.floats(),
)


@st.composite
def _tensor(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["objects", "objects2d", "numeric", "fixed", "none", "list"]))
    values = draw(st.lists(_element, max_size=7))
    if kind == "objects":
        return bytes_array(values)
    if kind == "objects2d":
        return bytes_array(values + values).reshape(2, -1)
    if kind == "numeric":
        return np.zeros(len(values), dtype=draw(st.sampled_from([np.float32, np.int64, np.bool_])))
    if kind == "fixed":
        return np.array([v for v in values if isinstance(v, bytes)] or [b""])
    return None if kind == "none" else values


@settings(max_examples=300, deadline=None)
@given(query=_tensor(), ids=_tensor())
def test_decoding_arbitrary_tensors_gives_a_clear_error_or_a_valid_request(query, ids) -> None:
    try:
        got = decode_request(query, ids, max_candidates=5)
    except RequestError as e:
        assert str(e)
        return
    assert isinstance(got.query, str) and got.query.strip()
    assert 1 <= len(got.item_ids) <= 5
    assert all(isinstance(i, str) and i for i in got.item_ids)
