"""K/V blob codec: one `StoredUnit` ⇄ bytes for the feature store, with every byte checked on the way back.

Byte layout (all integers little-endian)::

    offset  size  field
    0       4     magic  b"GRKV"
    4       2     frame version (u16) = FORMAT_VERSION
    6       8     payload length P (u64)
    14      16    blake2b-128 digest of bytes 0..13 followed by the payload
    30      P     payload: a safetensors buffer (`safetensors.torch.save`)

Why a frame around safetensors: safetensors has no checksum, and its metadata cannot hold a digest of
the buffer that contains it. The frame comes first so that decoding can, before parsing anything it
does not trust, tell a cut-off blob (length short of P → `TruncatedBlobError`) from a damaged one
(digest mismatch, bad magic, trailing bytes → `CorruptBlobError`). The digest covers the frame fields
as well as the payload, so a flipped byte anywhere is caught before a tensor is built (one in the magic,
version or length field may surface as bad magic, `UnsupportedVersionError` or a length mismatch
instead, since those are read first — still a `KVBlobError`, never a tensor). The digest is
for corruption, not for adversaries: it is unkeyed, and a blob with a valid digest still goes through
every structural check below.

Payload metadata (safetensors string metadata; every key required, no others allowed)::

    format="gistrank-kv"  version  fingerprint  content_hash
    compressor  budget                                      (what the columns are: gist/select/prefix, k)
    num_layers  num_kv_heads  tail_slots  head_dim          (L, H_kv, s, h: must match the tensors)
    item_tokens  prefix_tokens  query_start  truncated      (position data: j, p, the query's first id)
    storage_dtype  source_dtype                             (how it is stored / what it was encoded from)
    head_budgets                                            ("uniform", or "per_head": see below)

The compressor must be a known one, and `tail_slots` and `query_start` must be what it gives for
(budget, j, p): a blob cannot describe a layout its reader would misplace the query in.
Version history: 1 gists only; 2 added prefix_tokens; 3 names the compressor, budget and query
start; 4 (this) adds per-head budgets, and the int4 / int2 storages (a decoder that predates them
refuses such a blob as an unknown storage dtype: a cache miss). Older blobs are refused with
`UnsupportedVersionError`, whose message says to rewrite them: the store is derived data, a serving
replica recomputes such a row on read, and `gistrank materialize` rewrites the whole catalog.

Payload tensors:

* float32 / float16 / bfloat16: ``kv`` (L, 2, H_kv, p + s, h) in that dtype — the K/V cast once, so decoding
  gives back exactly `kv.to(storage_dtype)`.
* int8: ``kv`` int8 (L, 2, H_kv, p + s, h) in [-127, 127] with float32 scales ``k_scale`` (L, H_kv, 1, h)
  and ``v_scale`` (L, H_kv, p + s, 1). Symmetric absmax quantisation: x̂ = q·s with s = max|x| / 127 over the
  group. Keys are grouped per channel (over the p + k positions) because RoPE-rotated keys carry a few
  outlier channels that would swamp a per-token scale; values have no such channels and are grouped
  per token (over the h channels), which needs k/h as many scales (KIVI, Liu et al. 2024). Error
  bound: |x̂ − x| ≤ s/2 = max|x_group| / 254 ≤ max|x| / 254 (plus float32 rounding), before the cast to
  the decode dtype. Size: L·H_kv·(2·k·h + 4·h + 4·k) bytes, about 0.64× fp16 at k=8, h=64.

* int4 / int2: ``kv`` uint8 (L, 2, H_kv, p + s, h·b/8), the b-bit codes of 8/b consecutive channels per
  byte (the lowest bits first), with float16 ``k_scale`` and ``k_min`` (L, H_kv, ⌈(p + s)/G⌉, h) and
  ``v_scale`` and ``v_min`` (L, H_kv, p + s, ⌈h/G⌉), G = LOWBIT_GROUP = 32. Asymmetric group-wise
  quantisation (KIVI, Liu et al. 2024): keys per channel over groups of G positions, values per position
  over groups of G channels; x̂ = q·s + m with q ∈ [0, 2^b − 1], m the group's minimum rounded down and
  s = (max − min)/(2^b − 1) rounded up to float16, so the codes cover the group. Error bound:
  |x̂ − x| ≤ s/2 + (min − m) (plus float32 rounding). At 2 bits four codes share a byte and the float16
  scale and minimum of each group of 32 add one bit per value: about 3 bits a value at int2, 5 at int4.
  Values beyond float16's range cannot be stored this way (refused at encode).

Per-head budgets (``head_budgets="per_head"``, `StoredUnit.head_tails`): every layer keeps H_kv·s tail columns
but its heads share them unevenly. The payload then holds ``head_tails`` int32 (L, H_kv), each head's
share (each layer's row sums to H_kv·s), and the real columns only, packed head after head: ``kv``
(L, 2, T, h) with T = H_kv·(p + s) — head 0's p + s₀ columns, then head 1's, … — and for int8
``v_scale`` (L, T, 1) the same way (int4 / int2: the codes, ``v_scale`` and ``v_min``; the key parameters
are per head already). Decoding unpacks into
(L, 2, H_kv, p + S, h), S the widest share, each head's real columns first and zeros after them,
which `score` masks per layer and head. The bytes are those of a uniform unit of the same s.

Decoding returns the tensor in `dtype` when given, else in `source_dtype` — the dtype of the K/V that
was encoded, i.e. the producing model's compute dtype, so a decoded blob passes `Reranker.check_kv`
of the model that wrote it whatever the storage dtype was.

Every failure is a `KVBlobError` subclass; exceptions from safetensors, json or int parsing never escape.
No pickle anywhere: tensors go through safetensors, metadata through json.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from reranker.core.compressors import compressor_for
from reranker.core.errors import FingerprintMismatchError, GistRankError
from reranker.core.kv import StoredUnit, held_columns

MAGIC = b"GRKV"
FORMAT_VERSION = 4  # 2: prefix_tokens; 3: compressor, budget, query_start; 4: per-head budgets
FORMAT_NAME = "gistrank-kv"
_PREFIX = struct.Struct("<4sHQ")  # magic, frame version, payload length
_DIGEST_SIZE = 16
HEADER_SIZE = _PREFIX.size + _DIGEST_SIZE  # 30

_FLOAT_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
LOWBIT_BITS = {"int4": 4, "int2": 2}
LOWBIT_GROUP = 32  # values per scale and minimum (KIVI's group size)
STORAGE_DTYPES = (*_FLOAT_DTYPES, "int8", *LOWBIT_BITS)
# safetensors' names
_ST_DTYPE = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int8": "I8",
    "int32": "I32",
    "uint8": "U8",
}
_LOWBIT_PARAMS = ("k_scale", "k_min", "v_scale", "v_min")
_INT8_MAX = 127  # symmetric: -128 is never produced, so q and -q are both representable
_META_KEYS = frozenset(
    {
        "format",
        "version",
        "fingerprint",
        "content_hash",
        "compressor",
        "budget",
        "num_layers",
        "num_kv_heads",
        "tail_slots",
        "head_dim",
        "item_tokens",
        "prefix_tokens",
        "query_start",
        "truncated",
        "storage_dtype",
        "source_dtype",
        "head_budgets",
    }
)
_UINT = re.compile(r"0|[1-9][0-9]{0,17}")  # ASCII only: int() would also take "+1", " 1", "1_0", "١"


class KVBlobError(GistRankError):
    """A stored K/V blob that cannot be used. Callers treat it as a cache miss and recompute."""


class CorruptBlobError(KVBlobError):
    """The bytes were damaged or are not a GistRank K/V blob (bad magic, checksum, trailing bytes)."""


class TruncatedBlobError(KVBlobError):
    """The blob is shorter than its frame says it is."""

    def __init__(self, got: int, needed: int) -> None:
        super().__init__(f"K/V blob truncated: {got} bytes, needs {needed}")
        self.got = got
        self.needed = needed


class UnsupportedVersionError(KVBlobError):
    """A blob written by another version of this codec."""

    def __init__(self, version: int) -> None:
        hint = (
            "; it predates this codec's stored unit: serving recomputes such rows on read, "
            "`gistrank materialize` rewrites the catalog"
            if version < FORMAT_VERSION
            else ""
        )
        super().__init__(
            f"K/V blob format version {version}; this codec reads version {FORMAT_VERSION}{hint}"
        )
        self.version = version


class ForeignFingerprintError(KVBlobError, FingerprintMismatchError):
    """An intact blob produced by other model weights or another gist config.

    Also a `FingerprintMismatchError`, so code that treats any fingerprint mismatch as a cache miss
    catches it without knowing about blobs."""


class BlobMetadataError(KVBlobError):
    """A blob with a valid checksum whose payload, metadata or tensors are malformed or inconsistent."""


@dataclass(frozen=True)
class DecodedKV:
    kv: StoredUnit
    content_hash: str  # hash of the item content the K/V was compressed from (idempotent writes)
    storage_dtype: str  # one of STORAGE_DTYPES: how the blob stored the tensor


def kv_nbytes_formula(
    num_layers: int, positions: int, num_kv_heads: int, head_dim: int, bytes_per_elem: int | float
) -> int:
    """Bytes of one item's cached K/V: 2·L·(p + k)·H_kv·h·b (DESIGN §4); `positions` = p + k."""
    return int(2 * num_layers * positions * num_kv_heads * head_dim * bytes_per_elem)


def payload_nbytes(
    num_layers: int, positions: int, num_kv_heads: int, head_dim: int, storage_dtype: str
) -> int:
    """Tensor bytes of one item's blob in `storage_dtype` (the frame and metadata add a few hundred):
    `kv_nbytes_formula` for the float types; for int8 one byte per value plus the float32 scales,
    L·H_kv·(2·P·h + 4·h + 4·P); for int4 / int2 b/8 bytes per value plus a float16 scale and minimum per
    group of LOWBIT_GROUP."""
    if storage_dtype == "int8":
        return num_layers * num_kv_heads * (2 * positions * head_dim + 4 * head_dim + 4 * positions)
    if storage_dtype in LOWBIT_BITS:
        codes = 2 * positions * head_dim * LOWBIT_BITS[storage_dtype] // 8
        groups = _groups(positions) * head_dim + positions * _groups(head_dim)  # keys', values'
        return num_layers * num_kv_heads * (codes + 2 * 2 * groups)  # float16 scale and minimum each
    size = torch.empty((), dtype=getattr(torch, storage_dtype)).element_size()
    return kv_nbytes_formula(num_layers, positions, num_kv_heads, head_dim, size)


def positions_within(
    nbytes: float, num_layers: int, num_kv_heads: int, head_dim: int, storage_dtype: str
) -> int:
    """The most positions whose K/V fits `nbytes` per item in `storage_dtype` (`payload_nbytes`, which
    grows with the positions): a budget in bytes turned into one in positions; 0 when none fits."""
    low, high = 0, 1
    while payload_nbytes(num_layers, high, num_kv_heads, head_dim, storage_dtype) <= nbytes:
        low, high = high, 2 * high
    while high - low > 1:  # payload(low) fits, payload(high) does not
        mid = (low + high) // 2
        fits = payload_nbytes(num_layers, mid, num_kv_heads, head_dim, storage_dtype) <= nbytes
        low, high = (mid, high) if fits else (low, mid)
    return low


def _digest(prefix: bytes, payload: bytes) -> bytes:
    h = hashlib.blake2b(prefix, digest_size=_DIGEST_SIZE)
    h.update(payload)
    return h.digest()


def _dtype_name(dtype: torch.dtype) -> str | None:
    return next((name for name, d in _FLOAT_DTYPES.items() if d == dtype), None)


def _pack(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """(L, C, H, S, Y) with `real` (L, H, S) bool, the same count a layer → (L, C, T, Y): the real
    columns of every head, head after head."""
    layers, channels, _, _, width = x.shape
    rows = x.permute(0, 2, 3, 1, 4)[real]  # (L·T, C, Y), ordered layer, head, column
    return rows.reshape(layers, -1, channels, width).transpose(1, 2).contiguous()


def _unpack(packed: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """`_pack`'s inverse: (L, C, T, Y) → (L, C, H, S, Y), zeros where `real` is False."""
    layers, channels, _, width = packed.shape
    out = packed.new_zeros(layers, *real.shape[1:], channels, width)
    out[real] = packed.transpose(1, 2).reshape(-1, channels, width)
    return out.permute(0, 3, 1, 2, 4)


# ---------------------------------------------------------------------------------------------- encode
def _quantize_int8(kv: torch.Tensor) -> dict[str, torch.Tensor]:
    x = kv.float()
    k_abs = x[:, 0].abs().amax(dim=2, keepdim=True)  # (L, H_kv, 1, h): per channel over the positions
    v_abs = x[:, 1].abs().amax(dim=3, keepdim=True)  # (L, H_kv, p + k, 1): per position over channels
    # An all-zero group gets scale 1 (its q is 0 anyway) so that decode can insist on positive scales.
    k_scale = torch.where(k_abs > 0, k_abs / _INT8_MAX, torch.ones_like(k_abs))
    v_scale = torch.where(v_abs > 0, v_abs / _INT8_MAX, torch.ones_like(v_abs))
    scale = torch.stack([k_scale.expand_as(x[:, 0]), v_scale.expand_as(x[:, 1])], dim=1)
    q = torch.round(x / scale).clamp_(-_INT8_MAX, _INT8_MAX).to(torch.int8)
    return {"kv": q.contiguous(), "k_scale": k_scale.contiguous(), "v_scale": v_scale.contiguous()}


def _groups(n: int) -> int:
    return -(-n // LOWBIT_GROUP)


def _group_extremes(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) of `x` over consecutive groups of LOWBIT_GROUP along `dim` (the last group may be
    shorter), the grouped dimension of the result one entry per group."""
    n = x.shape[dim]
    pad = _groups(n) * LOWBIT_GROUP - n
    if pad:  # repeating the last entry changes neither extreme of its group
        x = torch.cat([x, x.narrow(dim, n - 1, 1).expand(*x.shape[:dim], pad, *x.shape[dim + 1 :])], dim)
    grouped = x.unflatten(dim, (-1, LOWBIT_GROUP))
    return grouped.amin(dim + 1), grouped.amax(dim + 1)


def _per_element(params: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """A group parameter repeated over its group's entries along `dim` (n entries)."""
    return params.repeat_interleave(LOWBIT_GROUP, dim).narrow(dim, 0, n)


def _lowbit_params(lo: torch.Tensor, hi: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float16 (scale, minimum) whose codes 0 … 2^b − 1 cover [lo, hi]: the minimum rounded down, the scale
    rounded up; a group of one value gets scale 1 (its codes are all 0), so decode can insist on s > 0."""
    span = (hi - lo) / (2**bits - 1)
    scale = torch.where(span > 0, span, torch.ones_like(span)).half()
    scale = torch.where(scale.float() < span, torch.nextafter(scale, scale.new_tensor(torch.inf)), scale)
    low = lo.half()
    low = torch.where(low.float() > lo, torch.nextafter(low, low.new_tensor(-torch.inf)), low)
    if not (torch.isfinite(scale).all() and torch.isfinite(low).all()):
        raise ValueError("K/V values beyond float16's range cannot be stored in 4 or 2 bits")
    return scale, low


def _pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes (..., h) of `bits` bits → (..., h·bits/8) bytes, the lowest bits holding the first."""
    per_byte = 8 // bits
    grouped = codes.unflatten(-1, (-1, per_byte)).to(torch.int32)
    shifts = torch.arange(per_byte, dtype=torch.int32) * bits
    return (grouped << shifts).sum(-1).to(torch.uint8)


def _unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """`_pack_codes`'s inverse: (..., h·bits/8) bytes → uint8 codes (..., h)."""
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, dtype=torch.int32) * bits
    codes = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & (2**bits - 1)
    return codes.flatten(-2).to(torch.uint8)


def _quantize_lowbit(kv: torch.Tensor, bits: int) -> dict[str, torch.Tensor]:
    x = kv.float()
    positions, head_dim = x.shape[3], x.shape[4]
    if head_dim % (8 // bits):
        raise ValueError(
            f"head_dim {head_dim} is not a multiple of {8 // bits}: {bits}-bit codes fill whole bytes"
        )
    k_scale, k_min = _lowbit_params(*_group_extremes(x[:, 0], 2), bits)  # per channel over positions
    v_scale, v_min = _lowbit_params(*_group_extremes(x[:, 1], 3), bits)  # per position over channels
    scale = torch.stack(
        [_per_element(k_scale, 2, positions), _per_element(v_scale, 3, head_dim)], dim=1
    ).float()
    low = torch.stack([_per_element(k_min, 2, positions), _per_element(v_min, 3, head_dim)], dim=1).float()
    codes = torch.round((x - low) / scale).clamp_(0, 2**bits - 1).to(torch.uint8)
    return {
        "kv": _pack_codes(codes, bits),
        "k_scale": k_scale,
        "k_min": k_min,
        "v_scale": v_scale,
        "v_min": v_min,
    }


def _dequantize_lowbit(tensors: dict[str, torch.Tensor], bits: int) -> torch.Tensor:
    codes = _unpack_codes(tensors["kv"], bits).float()  # (L, 2, H_kv, P, h)
    positions, head_dim = codes.shape[3], codes.shape[4]
    k = codes[:, 0] * _per_element(tensors["k_scale"].float(), 2, positions)
    k += _per_element(tensors["k_min"].float(), 2, positions)
    v = codes[:, 1] * _per_element(tensors["v_scale"].float(), 3, head_dim)
    v += _per_element(tensors["v_min"].float(), 3, head_dim)
    return torch.stack([k, v], dim=1)


def encode(kv: StoredUnit, content_hash: str, storage_dtype: str | None = None) -> bytes:
    """Serialise `kv` (stored as `storage_dtype`, default its own dtype) into a checksummed blob.

    Raises `ValueError` for an unknown storage dtype, an empty fingerprint or content hash, a tensor
    that is not (L, 2, H_kv, p + k, h) float, or values that are not finite in the storage dtype (NaN/inf
    K/V would poison every score silently, so it is refused here rather than stored).
    """
    source = _dtype_name(kv.kv.dtype)
    if source is None:
        raise ValueError(f"K/V dtype {kv.kv.dtype} is not one of {list(_FLOAT_DTYPES)}")
    storage = storage_dtype or source
    if storage not in STORAGE_DTYPES:
        raise ValueError(f"storage_dtype {storage!r} is not one of {list(STORAGE_DTYPES)}")
    shape = tuple(kv.kv.shape)
    if len(shape) != 5 or shape[1] != 2 or min(shape) < 1:
        raise ValueError(f"K/V shape {shape} is not (L, 2, H_kv, p + s, h)")
    if not kv.fingerprint or not content_hash:
        raise ValueError("fingerprint and content_hash must be non-empty")
    _check_layout(
        kv.compressor, kv.budget, kv.item_tokens, kv.prefix_tokens, kv.positions, kv.query_start, ValueError
    )

    tensor = kv.kv.detach().cpu()
    if storage == "int8" or storage in LOWBIT_BITS:
        if not torch.isfinite(tensor).all():
            raise ValueError("K/V has non-finite values")
        tensors = (
            _quantize_int8(tensor) if storage == "int8" else _quantize_lowbit(tensor, LOWBIT_BITS[storage])
        )
    else:
        cast = tensor.to(_FLOAT_DTYPES[storage]).contiguous()
        if not torch.isfinite(cast).all():
            raise ValueError(f"K/V has values that are not finite in {storage}")
        tensors = {"kv": cast}
    if kv.head_tails is not None:  # only the real columns are stored (module docstring)
        real = kv.real_columns()
        tensors["kv"] = _pack(tensors["kv"], real)
        for name in ("v_scale", "v_min"):  # per position: only the real columns' (keys' are per head)
            if name in tensors:
                tensors[name] = _pack(tensors[name][:, None], real)[:, 0]
        tensors["head_tails"] = kv.tail_lens().to(torch.int32)

    num_layers, _, num_kv_heads, _, head_dim = shape
    metadata = {
        "format": FORMAT_NAME,
        "version": str(FORMAT_VERSION),
        "fingerprint": kv.fingerprint,
        "content_hash": content_hash,
        "compressor": kv.compressor,
        "budget": str(kv.budget),
        "num_layers": str(num_layers),
        "num_kv_heads": str(num_kv_heads),
        "tail_slots": str(kv.tail_slots),
        "head_dim": str(head_dim),
        "item_tokens": str(kv.item_tokens),
        "prefix_tokens": str(kv.prefix_tokens),
        "query_start": str(kv.query_start),
        "truncated": "true" if kv.truncated else "false",
        "storage_dtype": storage,
        "source_dtype": source,
        "head_budgets": "uniform" if kv.head_tails is None else "per_head",
    }
    payload = save(tensors, metadata=metadata)
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(payload))
    return prefix + _digest(prefix, payload) + payload


def _check_layout(
    compressor: str,
    budget: int,
    item_tokens: int,
    prefix_tokens: int,
    positions: int,
    query_start: int,
    error: type[Exception],
) -> None:
    """Raise `error` unless the unit's columns and query start are what `compressor` gives for it."""
    try:
        kind = compressor_for(compressor)
    except ValueError as e:
        raise error(str(e)) from None
    if budget < 1 or item_tokens < 1 or not 0 <= prefix_tokens <= min(item_tokens, positions):
        raise error(f"budget={budget}, item_tokens={item_tokens}, prefix_tokens={prefix_tokens} inconsistent")
    tail = kind.tail_slots(budget, item_tokens, prefix_tokens)
    if positions != prefix_tokens + tail:
        raise error(f"{positions} positions; {compressor} k={budget} stores p + s = {prefix_tokens + tail}")
    start = kind.query_start(budget, item_tokens, prefix_tokens)
    if query_start != start:
        raise error(f"query_start={query_start}; {compressor} k={budget} puts the query at {start}")


# ---------------------------------------------------------------------------------------------- decode
def _unframe(blob: bytes) -> bytes:
    """Check magic, version, length and digest; return the payload, trusted byte for byte."""
    if len(blob) < _PREFIX.size:
        # A blob too short to hold its own frame: truncated if it is the start of one, else foreign.
        if not MAGIC.startswith(blob[: len(MAGIC)]):
            raise CorruptBlobError("not a GistRank K/V blob (bad magic)")
        raise TruncatedBlobError(len(blob), HEADER_SIZE)
    magic, version, length = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptBlobError("not a GistRank K/V blob (bad magic)")
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(version)
    needed = HEADER_SIZE + length
    if len(blob) < needed:
        raise TruncatedBlobError(len(blob), needed)
    if len(blob) > needed:
        raise CorruptBlobError(f"K/V blob has {len(blob) - needed} bytes after its payload")
    payload = blob[HEADER_SIZE:]
    if _digest(blob[: _PREFIX.size], payload) != blob[_PREFIX.size : HEADER_SIZE]:
        raise CorruptBlobError("K/V blob checksum mismatch")
    return payload


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of duplicate keys; safetensors might not agree on which, so refuse them.
    out = dict(pairs)
    if len(out) != len(pairs):
        raise BlobMetadataError("duplicate key in safetensors header")
    return out


def _read_header(payload: bytes) -> dict[str, Any]:
    """The safetensors JSON header (8-byte length + JSON), read here because `load` drops metadata."""
    if len(payload) < 8:
        raise BlobMetadataError("payload too short for a safetensors header")
    n = int.from_bytes(payload[:8], "little")
    if n > len(payload) - 8:
        raise BlobMetadataError(f"safetensors header length {n} exceeds the payload")
    try:
        header = json.loads(payload[8 : 8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BlobMetadataError(f"unreadable safetensors header: {e}") from None
    if not isinstance(header, dict):
        raise BlobMetadataError("safetensors header is not an object")
    return header


def _uint(meta: dict[str, str], key: str, minimum: int) -> int:
    value = meta[key]
    if not _UINT.fullmatch(value) or int(value) < minimum:
        raise BlobMetadataError(f"metadata {key}={value!r} is not an integer ≥ {minimum}")
    return int(value)


def _check_entry(header: dict[str, Any], name: str, dtype: str, shape: tuple[int, ...]) -> None:
    entry = header[name]
    if (
        not isinstance(entry, dict)
        or entry.get("dtype") != _ST_DTYPE[dtype]
        or entry.get("shape") != list(shape)
    ):
        raise BlobMetadataError(f"tensor {name!r} is {entry!r}, expected {_ST_DTYPE[dtype]} {list(shape)}")


def decode(
    blob: bytes, expected_fingerprint: str | None = None, dtype: torch.dtype | None = None
) -> DecodedKV:
    """Validate and deserialise a blob from `encode`.

    `expected_fingerprint`: when given, a blob from any other model raises `ForeignFingerprintError`.
    `dtype`: float dtype of the returned tensor; default the dtype the K/V had when encoded.
    Raises only `KVBlobError` subclasses for anything wrong with `blob`.
    """
    if dtype is not None and _dtype_name(dtype) is None:
        raise ValueError(f"dtype {dtype} is not one of {list(_FLOAT_DTYPES)}")
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise TypeError(f"blob must be bytes, not {type(blob).__name__}")
    payload = _unframe(bytes(blob))
    header = _read_header(payload)

    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BlobMetadataError("safetensors metadata missing or not string → string")
    if set(meta) != _META_KEYS:
        missing, unknown = sorted(_META_KEYS - set(meta)), sorted(set(meta) - _META_KEYS)
        raise BlobMetadataError(f"metadata keys: missing {missing}, unknown {unknown}")
    if meta["format"] != FORMAT_NAME:
        raise BlobMetadataError(f"metadata format {meta['format']!r} is not {FORMAT_NAME!r}")
    if meta["version"] != str(FORMAT_VERSION):
        raise BlobMetadataError(f"metadata version {meta['version']!r} disagrees with frame version")
    if not meta["fingerprint"] or not meta["content_hash"]:
        raise BlobMetadataError("empty fingerprint or content_hash")
    if expected_fingerprint is not None and meta["fingerprint"] != expected_fingerprint:
        raise ForeignFingerprintError(expected_fingerprint, meta["fingerprint"])

    dims = tuple(_uint(meta, key, 1) for key in ("num_layers", "num_kv_heads", "head_dim"))
    num_layers, num_kv_heads, head_dim = dims
    item_tokens, prefix_tokens = _uint(meta, "item_tokens", 1), _uint(meta, "prefix_tokens", 0)
    positions = prefix_tokens + _uint(meta, "tail_slots", 0)
    budget, query_start = _uint(meta, "budget", 1), _uint(meta, "query_start", 0)
    _check_layout(
        meta["compressor"], budget, item_tokens, prefix_tokens, positions, query_start, BlobMetadataError
    )
    if meta["truncated"] not in ("true", "false"):
        raise BlobMetadataError(f"metadata truncated={meta['truncated']!r} is not true/false")
    storage, source = meta["storage_dtype"], meta["source_dtype"]
    if storage not in STORAGE_DTYPES or source not in _FLOAT_DTYPES:
        raise BlobMetadataError(f"storage_dtype={storage!r} / source_dtype={source!r} unknown")
    if meta["head_budgets"] not in ("uniform", "per_head"):
        raise BlobMetadataError(f"metadata head_budgets={meta['head_budgets']!r} is not uniform/per_head")
    per_head = meta["head_budgets"] == "per_head"

    # The tensor table is checked against the metadata before safetensors builds anything, so an
    # inconsistent blob never reaches the allocator with sizes nobody vouched for.
    shape = (num_layers, 2, num_kv_heads, positions, head_dim)
    columns = num_kv_heads * positions  # T: a layer's columns, packed head after head (per_head)
    bits = LOWBIT_BITS.get(storage)
    width = head_dim if bits is None else head_dim * bits // 8  # bytes of a row's codes
    if bits is not None and head_dim % (8 // bits):
        raise BlobMetadataError(f"head_dim {head_dim} does not fill whole bytes of {bits}-bit codes")
    code_dtype = "uint8" if bits is not None else storage
    expected = {"kv": (code_dtype, (num_layers, 2, columns, width) if per_head else (*shape[:-1], width))}
    if storage == "int8":
        expected["k_scale"] = ("float32", (num_layers, num_kv_heads, 1, head_dim))
        v_scale = (num_layers, columns, 1) if per_head else (num_layers, num_kv_heads, positions, 1)
        expected["v_scale"] = ("float32", v_scale)
    elif bits is not None:
        k_params = (num_layers, num_kv_heads, _groups(positions), head_dim)
        per_v = _groups(head_dim)
        v_params = (num_layers, columns, per_v) if per_head else (num_layers, num_kv_heads, positions, per_v)
        for name in _LOWBIT_PARAMS:
            expected[name] = ("float16", k_params if name.startswith("k_") else v_params)
    if per_head:
        expected["head_tails"] = ("int32", (num_layers, num_kv_heads))
    if set(header) != set(expected):
        raise BlobMetadataError(f"tensors {sorted(header)}, expected {sorted(expected)}")
    for name, (st_dtype, st_shape) in expected.items():
        _check_entry(header, name, st_dtype, st_shape)
    try:
        tensors = load(payload)
    except SafetensorError as e:
        raise BlobMetadataError(f"safetensors payload rejected: {e}") from None
    if storage == "int8":
        for name in ("k_scale", "v_scale"):
            if not (torch.isfinite(tensors[name]).all() and (tensors[name] > 0).all()):
                raise BlobMetadataError(f"{name} has non-positive or non-finite entries")
        if tensors["kv"].min() < -_INT8_MAX:
            raise BlobMetadataError("int8 K/V holds -128, which the encoder never writes")
    elif bits is not None:  # every byte is a valid run of codes; the parameters must be usable
        for name in _LOWBIT_PARAMS:
            if not torch.isfinite(tensors[name]).all():
                raise BlobMetadataError(f"{name} has non-finite entries")
        if not ((tensors["k_scale"] > 0).all() and (tensors["v_scale"] > 0).all()):
            raise BlobMetadataError("k_scale / v_scale have non-positive entries")
    elif not torch.isfinite(tensors["kv"]).all():
        raise BlobMetadataError("K/V has non-finite values")

    head_tails = None
    if per_head:
        shares, tail = tensors["head_tails"].long(), positions - prefix_tokens  # (L, H_kv), s
        room = item_tokens - prefix_tokens
        if shares.min() < 0 or shares.max() > room:
            raise BlobMetadataError(f"head_tails outside 0..{room}, the item's columns after its prefix")
        if (shares.sum(1) != num_kv_heads * tail).any():
            raise BlobMetadataError(f"head_tails: a layer's heads must share H_kv·s = {num_kv_heads * tail}")
        head_tails = tuple(tuple(row) for row in shares.tolist())
        real = held_columns(prefix_tokens, shares)
        tensors["kv"] = _unpack(tensors["kv"], real)
        for name in ("v_scale", "v_min"):
            if name in tensors:
                tensors[name] = _unpack(tensors[name][:, None], real)[:, 0]

    if storage == "int8":
        x = tensors["kv"].float()
        x[:, 0] *= tensors["k_scale"]
        x[:, 1] *= tensors["v_scale"]
    elif bits is not None:
        x = _dequantize_lowbit(tensors, bits)
        if per_head:  # a padding column's codes are 0, which reads as its group's minimum: zero it
            x.permute(0, 2, 3, 1, 4)[~real] = 0
    else:
        x = tensors["kv"]

    out_dtype = dtype or _FLOAT_DTYPES[source]
    # copy=True: the result must not alias the payload buffer, whatever the dtypes.
    gist_kv = StoredUnit(
        kv=x.to(out_dtype, copy=True),
        fingerprint=meta["fingerprint"],
        compressor=meta["compressor"],
        budget=budget,
        item_tokens=item_tokens,
        query_start=query_start,
        prefix_tokens=prefix_tokens,
        truncated=meta["truncated"] == "true",
        head_tails=head_tails,
    )
    return DecodedKV(kv=gist_kv, content_hash=meta["content_hash"], storage_dtype=storage)
