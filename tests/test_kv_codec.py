"""K/V blob codec: exact round trips, bounded int8 error, and typed errors for every damaged or foreign blob.

Frames are rebuilt here from the byte layout documented in `reranker.core.kv_codec` (not via its private
helpers), so these tests also pin that documentation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load, save

from reranker import FingerprintMismatchError, Reranker, RerankerConfig, StoredUnit
from reranker.core.kv_codec import (
    FORMAT_VERSION,
    HEADER_SIZE,
    LOWBIT_GROUP,
    MAGIC,
    STORAGE_DTYPES,
    BlobMetadataError,
    CorruptBlobError,
    ForeignFingerprintError,
    KVBlobError,
    TruncatedBlobError,
    UnsupportedVersionError,
    decode,
    encode,
    kv_nbytes_formula,
    payload_nbytes,
)

CONTENT_HASH = hashlib.sha256(b"item content").hexdigest()
FLOATS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
FUZZ = settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def kvs(tiny_model: Reranker) -> list[StoredUnit]:
    return tiny_model.compress(ITEMS)


@pytest.fixture(scope="module")
def blob(kvs: list[StoredUnit]) -> bytes:
    return encode(kvs[0], CONTENT_HASH, "float16")


def frame(payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """A frame with a valid digest around any payload, per the documented layout."""
    prefix = MAGIC + struct.pack("<HQ", version, len(payload))
    return prefix + hashlib.blake2b(prefix + payload, digest_size=16).digest() + payload


def payload_parts(blob: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a blob's safetensors payload."""
    payload = blob[HEADER_SIZE:]
    n = int.from_bytes(payload[:8], "little")
    return load(payload), json.loads(payload[8 : 8 + n])["__metadata__"]


# ----------------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("source", list(FLOATS))
@pytest.mark.parametrize("storage", list(FLOATS))
def test_float_round_trip_is_exact(kvs: list[StoredUnit], source: str, storage: str) -> None:
    for kv in kvs:
        src = dataclasses.replace(kv, kv=kv.kv.to(FLOATS[source]))
        decoded = decode(encode(src, CONTENT_HASH, storage))
        # default output dtype is the source's, so the model that wrote the blob accepts it as is
        assert decoded.kv.dtype == FLOATS[source]
        assert torch.equal(decoded.kv.kv, src.kv.to(FLOATS[storage]).to(FLOATS[source]))
        as_stored = decode(encode(src, CONTENT_HASH, storage), dtype=FLOATS[storage]).kv.kv
        assert as_stored.dtype == FLOATS[storage]
        assert torch.equal(as_stored, src.kv.to(FLOATS[storage]))


def test_default_storage_dtype_is_the_kv_dtype(kvs: list[StoredUnit]) -> None:
    decoded = decode(encode(kvs[0], CONTENT_HASH))
    assert decoded.storage_dtype == "float32"
    assert torch.equal(decoded.kv.kv, kvs[0].kv)


def _int8_bounds(x: torch.Tensor) -> torch.Tensor:
    """Per-element error bound: half a quantisation step of the element's group (K per channel over
    the gists, V per gist over the channels)."""
    k_bound = x[:, 0].abs().amax(dim=2, keepdim=True).expand_as(x[:, 0]) / 254
    v_bound = x[:, 1].abs().amax(dim=3, keepdim=True).expand_as(x[:, 1]) / 254
    return torch.stack([k_bound, v_bound], dim=1)


def test_int8_round_trip_within_half_step(kvs: list[StoredUnit]) -> None:
    for kv in kvs:
        decoded = decode(encode(kv, CONTENT_HASH, "int8"))
        assert decoded.storage_dtype == "int8" and decoded.kv.dtype == torch.float32
        err = (decoded.kv.kv - kv.kv).abs()
        assert (err <= _int8_bounds(kv.kv) * (1 + 1e-5) + 1e-30).all()
        assert err.max() <= kv.kv.abs().max() / 254 * (1 + 1e-5)


def test_int8_outlier_key_channel_does_not_coarsen_the_others(kvs: list[StoredUnit]) -> None:
    """Why keys are scaled per channel: one huge RoPE channel must not cost the others their precision."""
    x = kvs[0].kv.clone()
    x[:, 0, :, :, 3] *= 1000
    decoded = decode(encode(dataclasses.replace(kvs[0], kv=x), CONTENT_HASH, "int8")).kv.kv
    others = torch.ones(x.shape[-1], dtype=torch.bool)
    others[3] = False
    err = (decoded - x).abs()[:, 0][..., others]
    assert (err <= _int8_bounds(x)[:, 0][..., others] * (1 + 1e-5)).all()
    assert err.max() < x[:, 0, :, :, 3].abs().max() / 254 / 100


def test_int8_all_zero_groups_round_trip(kvs: list[StoredUnit]) -> None:
    zeros = dataclasses.replace(kvs[0], kv=torch.zeros_like(kvs[0].kv))
    assert torch.equal(decode(encode(zeros, CONTENT_HASH, "int8")).kv.kv, zeros.kv)


def test_metadata_round_trips(kvs: list[StoredUnit], tiny_model: Reranker) -> None:
    kv = dataclasses.replace(kvs[2], truncated=True)
    for storage in [*FLOATS, "int8"]:
        decoded = decode(encode(kv, CONTENT_HASH, storage), expected_fingerprint=tiny_model.fingerprint)
        assert decoded.content_hash == CONTENT_HASH
        assert decoded.storage_dtype == storage
        got = decoded.kv
        fields = ("fingerprint", "compressor", "budget", "item_tokens", "query_start", "prefix_tokens")
        assert [getattr(got, f) for f in fields] == [getattr(kv, f) for f in fields]
        assert got.truncated and got.query_start == kv.item_tokens + 4 and got.compressor == "gist"
        assert got.tail_slots == tiny_model.gist.num_gist == 4
        assert tuple(got.kv.shape) == tuple(kv.kv.shape)


@pytest.mark.parametrize("storage", [*FLOATS, "int8"])
def test_hybrid_prefix_round_trips(tiny_base: Path, storage: str) -> None:
    """Hybrid entries (p prefix columns + k gists, p < t for short items) keep their layout."""
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, keep_item_prefix=12, dtype="float32"), device="cpu"
    )
    kvs = model.compress(ITEMS)
    assert len({kv.prefix_tokens for kv in kvs}) > 1
    decoded = [decode(encode(kv, CONTENT_HASH, storage), model.fingerprint).kv for kv in kvs]
    assert [d.prefix_tokens for d in decoded] == [kv.prefix_tokens for kv in kvs]
    assert all(d.tail_slots == 4 for d in decoded)
    tolerance = 0.05 if storage in ("int8", "bfloat16") else 1e-3
    torch.testing.assert_close(
        model.score(QUERY, decoded), model.score(QUERY, kvs), rtol=tolerance, atol=tolerance
    )


def test_scores_from_decoded_kv_equal_the_originals(tiny_model: Reranker, kvs: list[StoredUnit]) -> None:
    original = tiny_model.score(QUERY, kvs)
    exact = [decode(encode(kv, CONTENT_HASH), expected_fingerprint=tiny_model.fingerprint).kv for kv in kvs]
    assert torch.equal(tiny_model.score(QUERY, exact), original)
    # lossy storage still decodes to the model's dtype, so score() accepts it; the scores move only a little
    for storage, tol in (("float16", 1e-3), ("int8", 5e-2)):
        lossy = [decode(encode(kv, CONTENT_HASH, storage)).kv for kv in kvs]
        torch.testing.assert_close(tiny_model.score(QUERY, lossy), original, rtol=0, atol=tol)


def test_decoded_tensor_owns_its_memory(blob: bytes) -> None:
    first = decode(blob).kv.kv
    first.zero_()
    assert decode(blob).kv.kv.abs().sum() > 0


# ------------------------------------------------------------------------------------------------ size
def test_fp16_blob_is_the_formula_plus_a_small_overhead(tiny_model: Reranker, kvs: list[StoredUnit]) -> None:
    kv = kvs[0]
    formula = kv_nbytes_formula(
        tiny_model.num_layers, kv.positions, tiny_model.num_kv_heads, tiny_model.head_dim, 2
    )
    assert formula == kv.nbytes // 2  # fp32 K/V in the tiny model
    overhead = len(encode(kv, CONTENT_HASH, "float16")) - formula
    assert HEADER_SIZE < overhead <= 640  # frame + safetensors header with metadata, independent of size


def test_int8_blob_size(tiny_model: Reranker, kvs: list[StoredUnit]) -> None:
    kv = kvs[0]
    layers, heads, k, h = tiny_model.num_layers, tiny_model.num_kv_heads, kv.positions, tiny_model.head_dim
    data = kv_nbytes_formula(layers, k, heads, h, 1) + 4 * layers * heads * (h + k)  # int8 + fp32 scales
    assert 0 < len(encode(kv, CONTENT_HASH, "int8")) - data <= 768
    assert payload_nbytes(layers, k, heads, h, "int8") == data


@pytest.mark.parametrize("storage", STORAGE_DTYPES)
def test_payload_nbytes_is_the_blob_less_its_header(
    tiny_model: Reranker, kvs: list[StoredUnit], storage: str
) -> None:
    """What evaluation reports as bytes per item: the blob's tensor bytes, its header aside (a constant:
    the frame, the metadata and one header entry per tensor — five for int4 / int2)."""
    header = 1024 if storage in LOWBIT else 768
    for kv in kvs:  # items of different stored lengths
        dims = (tiny_model.num_layers, kv.kv.shape[3], tiny_model.num_kv_heads, tiny_model.head_dim)
        assert HEADER_SIZE < len(encode(kv, CONTENT_HASH, storage)) - payload_nbytes(*dims, storage) <= header


# ---------------------------------------------------------------------------------- damaged / foreign
def _flipped(blob: bytes, offset: int, mask: int) -> bytes:
    damaged = bytearray(blob)
    damaged[offset] ^= mask
    return bytes(damaged)


def test_every_sampled_single_byte_flip_is_detected(blob: bytes) -> None:
    offsets = sorted({*range(HEADER_SIZE + 16), *range(0, len(blob), 7), len(blob) - 1})
    for offset in offsets:
        for mask in (0x01, 0x80, 0xFF):
            with pytest.raises(KVBlobError):
                decode(_flipped(blob, offset, mask))


def test_payload_flip_is_a_checksum_error(blob: bytes) -> None:
    with pytest.raises(CorruptBlobError, match="checksum"):
        decode(_flipped(blob, len(blob) // 2, 0x10))


@FUZZ
@given(data=st.data())
def test_random_byte_flips_are_detected(blob: bytes, data: st.DataObject) -> None:
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(blob) - 1), st.integers(1, 255)),
            min_size=1,
            max_size=4,
            unique_by=lambda f: f[0],
        )
    )
    damaged = bytearray(blob)
    for offset, mask in flips:
        damaged[offset] ^= mask
    with pytest.raises(KVBlobError):
        decode(bytes(damaged))


def test_every_truncation_is_a_truncation_error(blob: bytes) -> None:
    for length in range(len(blob)):
        with pytest.raises(TruncatedBlobError):
            decode(blob[:length])


def test_trailing_bytes_are_corruption(blob: bytes) -> None:
    with pytest.raises(CorruptBlobError):
        decode(blob + b"\x00")


def test_foreign_magic_is_corruption(blob: bytes) -> None:
    with pytest.raises(CorruptBlobError, match="magic"):
        decode(b"PK\x03\x04" + blob[4:])
    with pytest.raises(CorruptBlobError, match="magic"):
        decode(b"{}")


def test_other_version_is_refused(blob: bytes) -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        decode(frame(blob[HEADER_SIZE:], version=FORMAT_VERSION + 1))
    assert info.value.version == FORMAT_VERSION + 1


def test_a_blob_of_the_previous_release_is_refused_with_what_to_do(tiny_model: Reranker) -> None:
    """Format 2 (written by the release before units named their compressor; the fixture is a real
    blob of `tiny_model`, encoded by that release) is refused, never guessed: the message says that
    serving recomputes the row and how to rewrite the store. `read_kv` raises the same `KVBlobError`,
    which every caller treats as a cache miss."""
    old = (Path(__file__).parent / "data" / "kv-format2-tiny-llama-k4.blob").read_bytes()
    assert old[:4] == b"GRKV" and int.from_bytes(old[4:6], "little") == 2
    # the same model, only older: that release stamped the whole model's fingerprint (there was one)
    assert payload_parts(old)[1]["fingerprint"] == tiny_model.reader_fingerprint
    with pytest.raises(UnsupportedVersionError, match=r"version 2; .*recomputes.*gistrank materialize"):
        decode(old, expected_fingerprint=tiny_model.fingerprint)
    with pytest.raises(KVBlobError):
        tiny_model.read_kv(old)


def test_foreign_fingerprint_is_refused(tiny_base: Path, tiny_model: Reranker) -> None:
    other = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, max_item_tokens=512, dtype="float32"), device="cpu"
    )
    assert other.fingerprint != tiny_model.fingerprint
    foreign = encode(other.compress(ITEMS[:1])[0], CONTENT_HASH)
    with pytest.raises(ForeignFingerprintError) as info:
        decode(foreign, expected_fingerprint=tiny_model.fingerprint)
    assert (info.value.expected, info.value.got) == (tiny_model.fingerprint, other.fingerprint)
    assert isinstance(info.value, FingerprintMismatchError)  # a cache miss to the scoring path too
    assert decode(foreign, expected_fingerprint=other.fingerprint).kv.fingerprint == other.fingerprint


def _tampered(
    blob: bytes, meta: dict[str, str | None] | None = None, tensors: dict[str, torch.Tensor] | None = None
) -> bytes:
    """Re-encode a blob's payload with other metadata (None deletes a key) or tensors, and a valid digest."""
    old_tensors, old_meta = payload_parts(blob)
    new_meta = {k: v for k, v in {**old_meta, **(meta or {})}.items() if v is not None}
    return frame(save(tensors if tensors is not None else old_tensors, metadata=new_meta))


@pytest.mark.parametrize(
    "change",
    [
        {"format": "other"},
        {"version": "1"},
        {"prefix_tokens": "1"},  # shape no longer matches p + k
        {"prefix_tokens": None},
        {"fingerprint": ""},
        {"content_hash": None},
        {"extra": "1"},
        {"tail_slots": "5"},
        {"tail_slots": None},
        {"compressor": "bogus"},
        {"compressor": "prefix"},  # a gist unit read as prefix: query start and columns disagree
        {"budget": "5"},
        {"budget": "0"},
        {"query_start": "0"},
        {"num_layers": "0"},
        {"head_dim": "+16"},
        {"head_dim": "016"},
        {"item_tokens": "-1"},
        {"item_tokens": "1e3"},
        {"item_tokens": "0"},
        {"truncated": "yes"},
        {"storage_dtype": "bfloat16"},
        {"storage_dtype": "float64"},
        {"source_dtype": "int8"},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_bad_metadata_with_valid_checksum_is_refused(blob: bytes, change: dict[str, str | None]) -> None:
    with pytest.raises(BlobMetadataError):
        decode(_tampered(blob, change))


def test_bad_tensors_with_valid_checksum_are_refused(kvs: list[StoredUnit], blob: bytes) -> None:
    tensors, _ = payload_parts(blob)
    nan = tensors["kv"].clone()
    nan[0, 0, 0, 0, 0] = float("nan")
    int8 = encode(kvs[0], CONTENT_HASH, "int8")
    q = payload_parts(int8)[0]
    cases = [
        _tampered(blob, tensors={"kv": nan}),
        _tampered(blob, tensors={"kv": tensors["kv"].float()}),  # dtype disagrees with storage_dtype
        _tampered(
            blob, tensors={"kv": tensors["kv"][:, :, :, :3].contiguous()}
        ),  # shape disagrees with tail_slots
        _tampered(blob, tensors={**tensors, "extra": torch.zeros(1)}),
        _tampered(int8, tensors={**q, "kv": torch.full_like(q["kv"], -128)}),
        _tampered(int8, tensors={**q, "k_scale": torch.zeros_like(q["k_scale"])}),
        _tampered(int8, tensors={**q, "v_scale": torch.full_like(q["v_scale"], float("inf"))}),
        _tampered(int8, tensors={"kv": q["kv"]}),  # scales missing
    ]
    for bad in cases:
        with pytest.raises(BlobMetadataError):
            decode(bad)


def test_bad_per_head_shares_with_valid_checksum_are_refused(tiny_base: Path, blob: bytes) -> None:
    """Per-head budgets (`head_budgets="per_head"`): the shares must say where every packed column goes."""
    gist = RerankerConfig(num_gist=4, compressor="select", select_head_budget="adaptive", dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist, device="cpu")
    ragged = encode(next(u for u in model.compress(ITEMS) if u.head_tails is not None), CONTENT_HASH)
    tensors, _ = payload_parts(ragged)
    shares = tensors["head_tails"]
    one_more, negative = shares.clone(), shares.clone()
    one_more[0, 0] += 1  # layer 0's heads hold a column more than H_kv·s
    negative[0, 0], negative[0, 1] = -1, negative[0, 1] + negative[0, 0] + 1
    cases = [
        _tampered(ragged, tensors={**tensors, "head_tails": one_more}),
        _tampered(ragged, tensors={**tensors, "head_tails": negative}),
        _tampered(ragged, tensors={**tensors, "head_tails": shares.float()}),
        _tampered(ragged, tensors={"kv": tensors["kv"]}),  # the shares missing
        _tampered(ragged, {"head_budgets": "uniform"}),  # packed columns read as one block per head
        _tampered(blob, {"head_budgets": "per_head"}),
        _tampered(blob, {"head_budgets": "some"}),
        _tampered(blob, {"head_budgets": None}),
    ]
    for bad in cases:
        with pytest.raises(BlobMetadataError):
            decode(bad)


def test_encode_refuses_what_it_cannot_store_faithfully(kvs: list[StoredUnit]) -> None:
    with pytest.raises(ValueError, match="storage_dtype"):
        encode(kvs[0], CONTENT_HASH, "float8")
    with pytest.raises(ValueError, match="content_hash"):
        encode(kvs[0], "")
    nan = kvs[0].kv.clone()
    nan[0, 0, 0, 0, 0] = float("nan")
    for storage in ("float32", "int8"):
        with pytest.raises(ValueError, match="finite"):
            encode(dataclasses.replace(kvs[0], kv=nan), CONTENT_HASH, storage)
    with pytest.raises(ValueError, match="finite in float16"):  # 1e5 overflows fp16
        encode(dataclasses.replace(kvs[0], kv=kvs[0].kv * 0 + 1e5), CONTENT_HASH, "float16")


# ------------------------------------------------------------------------------------------------ fuzz
def _decode_or_typed_error(data: bytes) -> None:
    try:
        decoded = decode(data)
    except KVBlobError:
        return
    assert isinstance(decoded.kv, StoredUnit)


@FUZZ
@given(st.binary(max_size=4096))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _decode_or_typed_error(data)


@FUZZ
@given(st.integers(0, 4096) | st.integers(0, 2**64 - 1), st.binary(max_size=2048))
def test_fuzz_valid_magic_and_version(declared_length: int, data: bytes) -> None:
    _decode_or_typed_error(MAGIC + struct.pack("<HQ", 1, declared_length) + data)


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_payload_behind_a_valid_checksum(data: bytes) -> None:
    _decode_or_typed_error(frame(data))


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_payload_behind_a_valid_checksum(blob: bytes, data: st.DataObject) -> None:
    """Near-valid safetensors headers and tensor data: reaches json, metadata and safetensors parsing."""
    payload = bytearray(blob[HEADER_SIZE:])
    for offset, value in data.draw(
        st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)))
    ):
        payload[offset] = value
    cut = data.draw(st.integers(0, len(payload)))
    _decode_or_typed_error(frame(bytes(payload[:cut])))


_META_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["tail_slots", "item_tokens", "query_start", "budget", "compressor", "truncated", "version"]
        )
        | _META_TEXT,
        _META_TEXT | st.integers(-2, 40).map(str),
        max_size=6,
    )
)
def test_fuzz_metadata_behind_a_valid_checksum(blob: bytes, meta: dict[str, str]) -> None:
    _decode_or_typed_error(_tampered(blob, meta))


# --------------------------------------------------------------------------------------- int4 and int2
LOWBIT = {"int4": 4, "int2": 2}


def _codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The documented byte layout read back: 8/b codes a byte, the lowest bits the first channel's."""
    per_byte = 8 // bits
    codes = [(packed.long() >> (bits * i)) & (2**bits - 1) for i in range(per_byte)]
    return torch.stack(codes, dim=-1).flatten(-2)


def _expanded(params: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """A group parameter over its LOWBIT_GROUP entries along `dim` (the documented grouping)."""
    return params.float().repeat_interleave(LOWBIT_GROUP, dim).narrow(dim, 0, n)


def _dequantized(blob: bytes, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x̂, per-element bound s/2 + |m|·2⁻¹⁰) computed from the blob's stored codes and parameters."""
    t, _ = payload_parts(blob)
    q = _codes(t["kv"], bits).float()
    p, h = q.shape[3], q.shape[4]
    scale = torch.stack([_expanded(t["k_scale"], 2, p), _expanded(t["v_scale"], 3, h)], dim=1)
    low = torch.stack([_expanded(t["k_min"], 2, p), _expanded(t["v_min"], 3, h)], dim=1)
    # the minimum is rounded down to float16 by at most one of its ulps (≤ |m|·2⁻¹⁰)
    return q * scale + low, scale / 2 + low.abs() * 2**-10 + 1e-6


@pytest.mark.lowbit
@pytest.mark.parametrize("storage", list(LOWBIT))
def test_lowbit_decode_is_exactly_the_stored_codes_and_within_their_bound(
    kvs: list[StoredUnit], storage: str
) -> None:
    bits = LOWBIT[storage]
    for kv in kvs:
        blob = encode(kv, CONTENT_HASH, storage)
        decoded = decode(blob)
        assert decoded.storage_dtype == storage and decoded.kv.kv.dtype == torch.float32
        expected, bound = _dequantized(blob, bits)
        assert torch.equal(decoded.kv.kv, expected)  # bit-exact: codes · scale + minimum
        assert ((decoded.kv.kv - kv.kv).abs() <= bound).all()
        codes = _codes(payload_parts(blob)[0]["kv"], bits)
        assert codes.max() == 2**bits - 1 and codes.min() == 0  # each group's range is used


@pytest.mark.lowbit
@pytest.mark.parametrize("storage", list(LOWBIT))
def test_lowbit_keys_per_channel_values_per_position(kvs: list[StoredUnit], storage: str) -> None:
    """An outlier key channel (RoPE) or value position coarsens only its own groups."""
    x = kvs[0].kv.clone()
    x[:, 0, :, :, 3] *= 1000
    x[:, 1, :, 1, :] *= 1000
    blob = encode(dataclasses.replace(kvs[0], kv=x), CONTENT_HASH, storage)
    err = (decode(blob).kv.kv - x).abs()
    _, bound = _dequantized(blob, LOWBIT[storage])
    assert (err <= bound).all()
    plain = (decode(encode(kvs[0], CONTENT_HASH, storage)).kv.kv - kvs[0].kv).abs()
    others = torch.ones(x.shape[-1], dtype=torch.bool)
    others[3] = False
    assert err[:, 0][..., others].max() <= plain[:, 0][..., others].max() * 1.01  # other key channels
    assert err[:, 1, :, 0].max() <= plain[:, 1, :, 0].max() * 1.01  # other value positions


@pytest.mark.lowbit
@pytest.mark.parametrize("storage", list(LOWBIT))
def test_lowbit_constant_groups_and_the_size_formula(
    tiny_model: Reranker, kvs: list[StoredUnit], storage: str
) -> None:
    zeros = dataclasses.replace(kvs[0], kv=torch.zeros_like(kvs[0].kv))
    assert torch.equal(decode(encode(zeros, CONTENT_HASH, storage)).kv.kv, zeros.kv)
    layers, heads, p, h = (
        tiny_model.num_layers,
        tiny_model.num_kv_heads,
        kvs[0].positions,
        tiny_model.head_dim,
    )
    groups = -(-p // LOWBIT_GROUP) * h + p * -(-h // LOWBIT_GROUP)
    assert payload_nbytes(layers, p, heads, h, storage) == layers * heads * (
        2 * p * h * LOWBIT[storage] // 8 + 4 * groups
    )
    assert payload_nbytes(layers, p, heads, h, storage) < payload_nbytes(layers, p, heads, h, "int8")


@pytest.mark.lowbit
@pytest.mark.parametrize("storage", list(LOWBIT))
def test_lowbit_scores_stay_near_the_originals(
    tiny_model: Reranker, kvs: list[StoredUnit], storage: str
) -> None:
    """The decoded unit is scored as any other (the model's dtype, its layout); the scores move with the
    quantisation error, more at 2 bits than at 4."""
    original = tiny_model.score(QUERY, kvs)
    moved = {}
    for name in ("int8", *LOWBIT):
        lossy = [decode(encode(kv, CONTENT_HASH, name), tiny_model.fingerprint).kv for kv in kvs]
        moved[name] = (tiny_model.score(QUERY, lossy) - original).abs().max().item()
    assert moved["int8"] <= moved["int4"] <= moved["int2"] < 1.0


@pytest.mark.lowbit
@FUZZ
@given(data=st.data(), storage=st.sampled_from(list(LOWBIT)))
def test_lowbit_blob_byte_flips_and_truncations_are_detected(
    kvs: list[StoredUnit], data: st.DataObject, storage: str
) -> None:
    blob = encode(kvs[1], CONTENT_HASH, storage)
    offset = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(KVBlobError):
        decode(_flipped(blob, offset, data.draw(st.integers(1, 255))))
    with pytest.raises(TruncatedBlobError):
        decode(blob[: data.draw(st.integers(0, len(blob) - 1))])


@pytest.mark.lowbit
def test_lowbit_parameters_that_cannot_decode_are_refused(kvs: list[StoredUnit]) -> None:
    blob = encode(kvs[0], CONTENT_HASH, "int4")
    tensors, _ = payload_parts(blob)
    for name, value in (
        ("k_scale", 0.0),
        ("v_scale", -1.0),
        ("k_min", float("inf")),
        ("v_min", float("nan")),
    ):
        bad = tensors[name].clone()
        bad.view(-1)[0] = value
        with pytest.raises(BlobMetadataError, match=name.split("_")[0]):
            decode(_tampered(blob, tensors={**tensors, name: bad}))
    wide = {
        **tensors,
        "kv": torch.zeros(*tensors["kv"].shape[:-1], tensors["kv"].shape[-1] * 2, dtype=torch.uint8),
    }
    with pytest.raises(BlobMetadataError, match="tensor 'kv'"):
        decode(_tampered(blob, tensors=wide))  # codes of 8-bit width under an int4 label
    with pytest.raises(BlobMetadataError):
        decode(_tampered(blob, {"storage_dtype": "int2"}))  # the same bytes read as 2-bit codes
