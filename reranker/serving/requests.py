"""Decoding and validation of a rerank request's tensors (QUERY, ITEM_IDS and the optional
FIRST_STAGE_SCORES), independent of Triton.

Triton has already checked names, datatypes and the declared shapes by the time a request reaches the
Python backend, but this module does not rely on that: it takes whatever arrays arrive and either
returns a `RerankRequest` or raises `RequestError` with a message that names the tensor, the element
and the problem. Nothing else escapes, whatever the input (see the hypothesis tests).

BYTES tensors reach the backend as numpy object arrays of `bytes`; clients that send str (tests,
in-process callers) are accepted too, since a str is already decoded text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from reranker.catalog.events import ItemId, validation_reason

QUERY = "QUERY"
ITEM_IDS = "ITEM_IDS"
FIRST_STAGE_SCORES = "FIRST_STAGE_SCORES"  # optional: the first stage's score of each id, request order
SCORES = "SCORES"  # outputs, one per item id: the served score (fused when first-stage scores came),
RERANK_SCORES = "RERANK_SCORES"  # the reranker's own score
STATUS = "STATUS"  # and its status string
DEFAULT_MAX_CANDIDATES = 200
# A byte bound checked before tokenising: the token limit (max_query_tokens) is checked later by
# the model, and no sane query is anywhere near this, so megabyte queries are refused cheaply here.
MAX_QUERY_BYTES = 4096

_item_id = TypeAdapter(ItemId)


class RequestError(ValueError):
    """A malformed request; the message says which tensor / element and why."""


@dataclass(frozen=True)
class RerankRequest:
    query: str
    item_ids: tuple[str, ...]
    first_stage: tuple[float, ...] | None = None  # one per id when the request brought them


def _text(value: Any, where: str) -> str:
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # a str from an in-process caller may hold lone surrogates
        except UnicodeEncodeError as e:
            raise RequestError(f"{where} is not valid UTF-8 text (character {e.start})") from None
        return value
    if not isinstance(value, bytes):  # np.bytes_ is a bytes subclass
        raise RequestError(f"{where} must be BYTES (UTF-8 text), got {type(value).__name__}")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"{where} is not valid UTF-8 (byte {e.start})") from None


def _elements(array: Any, name: str, max_len: int) -> list[Any]:
    """The elements of a 1-D tensor of 1..max_len elements."""
    if array is None:
        raise RequestError(f"missing input {name}")
    if not isinstance(array, np.ndarray):
        raise RequestError(f"{name} must be a tensor, got {type(array).__name__}")
    if array.dtype != np.object_ and array.dtype.kind not in "SU":
        raise RequestError(f"{name} must be BYTES, got {array.dtype}")
    if array.ndim != 1:
        raise RequestError(f"{name} must have shape [n] (1-D), got shape {list(array.shape)}")
    if array.shape[0] == 0:
        raise RequestError(f"{name} is empty")
    if array.shape[0] > max_len:
        raise RequestError(f"{name} has {array.shape[0]} elements, more than the limit of {max_len}")
    return array.tolist()


def _first_stage(array: Any, n: int) -> tuple[float, ...]:
    """FIRST_STAGE_SCORES: FP32 of shape [n], every element finite."""
    name = FIRST_STAGE_SCORES
    if not isinstance(array, np.ndarray):
        raise RequestError(f"{name} must be a tensor, got {type(array).__name__}")
    if array.dtype != np.float32:
        raise RequestError(f"{name} must be FP32, got {array.dtype}")
    if array.ndim != 1 or array.shape[0] != n:
        raise RequestError(
            f"{name} must have shape [{n}] (one score per {ITEM_IDS} element), got {list(array.shape)}"
        )
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise RequestError(f"{name}[{bad[0]}] is {array[bad[0]]}: every first-stage score must be finite")
    return tuple(float(x) for x in array)


def decode_request(
    query: Any,
    item_ids: Any,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    first_stage: Any = None,
) -> RerankRequest:
    """Validate QUERY (shape [1], non-blank UTF-8, ≤ MAX_QUERY_BYTES), ITEM_IDS (shape [n],
    1 ≤ n ≤ max_candidates, each a valid catalog item id) and, when given, FIRST_STAGE_SCORES (FP32,
    shape [n], finite). Duplicate ids are allowed and answered alike."""
    if isinstance(query, np.ndarray) and query.ndim == 1 and query.shape[0] > 1:
        raise RequestError(f"{QUERY} must hold exactly one string (shape [1]), got shape {list(query.shape)}")
    (raw_query,) = _elements(query, QUERY, 1)
    text = _text(raw_query, QUERY)
    if (size := len(text.encode("utf-8"))) > MAX_QUERY_BYTES:
        raise RequestError(f"{QUERY} is {size} bytes, over the limit of {MAX_QUERY_BYTES}")
    if not text.strip():
        raise RequestError(f"{QUERY} is empty")

    ids = []
    for i, raw in enumerate(_elements(item_ids, ITEM_IDS, max_candidates)):
        where = f"{ITEM_IDS}[{i}]"
        try:
            ids.append(_item_id.validate_python(_text(raw, where)))
        except ValidationError as e:
            raise RequestError(f"{where}: {validation_reason(e)}") from None
    scores = None if first_stage is None else _first_stage(first_stage, len(ids))
    return RerankRequest(query=text, item_ids=tuple(ids), first_stage=scores)
