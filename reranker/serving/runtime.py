"""Build the serving objects from a Triton model's parameters, and turn their results into responses.

The `parameters` block of each model's `config.pbtxt` (reranker/triton_repo/) is the one place where
every setting and its default is listed; `gistrank serve` rewrites values there for a run. A value may
name environment variables (`${VAR}`), expanded in the model process: settings that can carry a password
(catalog and Redis URLs) reach the models that way, since Triton serves the config to anyone. Here every
listed key must be present and parse as its type, and no unknown key is accepted, so a typo in a
deployment's config fails the model load with a message instead of silently using a default.

The Triton-facing helpers take the `triton_python_backend_utils` module as an argument: it exists only
inside the backend's stub process, and the model files stay thin.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import numpy as np
import torch

from reranker.catalog.database import Catalog
from reranker.core.model import Reranker
from reranker.serving.lookup import ByteLRU, KVLookup, RefreshRequests
from reranker.serving.requests import (
    FIRST_STAGE_SCORES,
    ITEM_IDS,
    QUERY,
    RERANK_SCORES,
    SCORES,
    STATUS,
    RequestError,
)
from reranker.serving.service import FullService, GistService, RerankResult
from reranker.serving.shadow import ScoreFull, ShadowSampler
from reranker.store import FeatureStoreUnavailableError, GistStore, redacted

logger = logging.getLogger(__name__)


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(name: str, value: str) -> str:
    """`${VAR}` in a parameter value → the model process's environment variable: how a password reaches
    the model without appearing in its config, which Triton serves to anyone (`ServerSettings.parameters`)."""

    def lookup(match: re.Match[str]) -> str:
        if match.group(1) not in os.environ:
            raise ValueError(f"model parameter {name} refers to ${{{match.group(1)}}}, which is not set")
        return os.environ[match.group(1)]

    return _ENV_REFERENCE.sub(lookup, value)


def _parse(cls: type[Any], raw: Mapping[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown, missing = sorted(set(raw) - set(names)), sorted(set(names) - set(raw))
    if unknown or missing:
        raise ValueError(f"model parameters: unknown {unknown}, missing {missing}")
    values = {}
    for name in names:
        value = _expand(name, raw[name])
        try:
            values[name] = hints[name](value)
        except ValueError:
            raise ValueError(
                f"model parameter {name}={redacted(raw[name])!r} is not a valid {hints[name].__name__}"
            ) from None
    return cls(**values)


@dataclass(frozen=True)
class GistParams:
    model_path: str  # GistRank checkpoint folder (or base alias / HF folder)
    device: str  # "auto" = CUDA when present, else CPU
    num_threads: int  # torch intra-op threads; 0 keeps torch's default
    catalog_url: str  # SQLAlchemy URL of the catalog (recompute source)
    feast_online: str  # sqlite | redis | none (no L2: every L1 miss recomputes)
    feast_dir: str  # Feast data dir (registry, SQLite online store); "" = GistStore's default
    redis_url: str  # for feast_online=redis; "" = GistStore's default
    feast_config: str  # a Feast feature_store.yaml used as written (replaces the three above); "" = none
    feast_retry_s: float  # after the store failed, skip it for this long
    # where recomputed items go as refresh requests (topic, security: GISTRANK_KAFKA_*); "" = nowhere, a
    # recompute then stays in this process's L1 only
    kafka_bootstrap_servers: str
    l1_bytes: int  # L1 bound in bytes of K/V
    l1_ttl_s: float  # L1 entry lifetime
    compress_batch: int  # items per compress forward on recompute
    max_candidates: int  # ITEM_IDS longer than this are refused
    shadow_rate: float  # fraction of requests also scored by the full-context model, off the request path
    shadow_model: str  # the Triton model that scores them

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Self:
        return _parse(cls, raw)


@dataclass(frozen=True)
class FullParams:
    model_path: str
    device: str
    num_threads: int
    catalog_url: str
    batch_size: int  # items per full-context forward
    max_candidates: int

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Self:
        return _parse(cls, raw)


def configure_logging() -> None:
    """Log lines of a model process: its stderr goes to Triton's log. The project's own INFO lines
    (fingerprint, metrics port, Feast fallbacks) belong there; the libraries' stay at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("reranker").setLevel(logging.INFO)


def triton_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """{key: value} of a Triton model config's `parameters` (each value is {"string_value": ...})."""
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}


_Params = TypeVar("_Params", GistParams, FullParams)


def initialize_params(params_type: type[_Params], args: Mapping[str, Any]) -> _Params:
    """How each model's `initialize` starts: its process's logging set up, then its parameters parsed from
    the `args` Triton passes (`model_config` is the config as JSON)."""
    configure_logging()
    return params_type.parse(triton_parameters(json.loads(args["model_config"])))


def load_model(model_path: str, device: str, num_threads: int) -> Reranker:
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    return Reranker.from_pretrained(model_path, device=None if device == "auto" else device)


class GistRuntime:
    """Everything a gist_reranker model instance owns; `close()` stops its threads. Its metrics go through
    Triton (`monitoring.serving_metrics.export_through_triton`, called by the model's `initialize`)."""

    def __init__(self, params: GistParams, score_full: ScoreFull) -> None:
        if params.feast_online not in ("sqlite", "redis", "none"):
            raise ValueError(f"feast_online must be sqlite, redis or none, got {params.feast_online!r}")
        model = load_model(params.model_path, params.device, params.num_threads)
        self.catalog = Catalog(params.catalog_url)
        store = None
        if params.feast_online != "none":
            # this model's own view: a replica never reads rows another model wrote (rollouts)
            fingerprint = model.fingerprint
            store = (
                GistStore(config=params.feast_config, fingerprint=fingerprint)
                if params.feast_config
                else GistStore(
                    params.feast_dir or None,
                    params.feast_online,
                    params.redis_url or None,
                    fingerprint=fingerprint,
                )
            )
            try:
                store.apply()  # a no-op when the consumer (or an earlier start) registered the view
            except FeatureStoreUnavailableError as e:
                logger.warning("feast not reachable at start, serving by recompute until it is: %s", e)
        self.refresh = None
        if params.kafka_bootstrap_servers:
            from reranker.catalog.kafka_settings import KafkaSettings
            from reranker.catalog.publisher import EventPublisher

            settings = KafkaSettings.from_env(bootstrap_servers=params.kafka_bootstrap_servers)
            self.refresh = RefreshRequests(lambda: EventPublisher(settings, flush_timeout_s=10.0))
        lookup = KVLookup(
            model,
            ByteLRU(params.l1_bytes, params.l1_ttl_s),
            self.catalog,
            store,
            self.refresh,
            compress_batch=params.compress_batch,
            feast_retry_s=params.feast_retry_s,
        )
        self.shadow = (
            ShadowSampler(params.shadow_rate, score_full, fusion=model.fusion)
            if params.shadow_rate > 0
            else None
        )
        self.service = GistService(model, lookup, self.shadow, params.max_candidates)
        logger.info(
            "gist_reranker ready: store fingerprint %s, reader %s, fusion with first-stage scores %s",
            model.fingerprint,
            model.reader_fingerprint,
            model.fusion,
        )

    def close(self, deadline_s: float = 10.0) -> None:
        """Stop the threads and connections, waiting `deadline_s` at most: Triton waits for `finalize`
        before it exits, so a store, broker or catalog that does not answer must not hold the shutdown
        (what is still blocked then ends with the process)."""
        closing = threading.Thread(target=self._close, name="gist-runtime-close", daemon=True)
        closing.start()
        closing.join(deadline_s)
        if closing.is_alive():
            logger.warning(
                "gist_reranker shutdown left unfinished after %.0f s (a service not answering)", deadline_s
            )

    def _close(self) -> None:
        if self.shadow is not None:
            self.shadow.close()
        if self.refresh is not None:
            self.refresh.close()
        self.catalog.close()


def build_full_service(params: FullParams) -> FullService:
    model = load_model(params.model_path, params.device, params.num_threads)
    return FullService(model, Catalog(params.catalog_url), params.batch_size, params.max_candidates)


# ------------------------------------------------------------------------------- Triton tensors glue
def respond(pb_utils: Any, handle: Any, request: Any) -> Any:
    """Run `handle(query, item_ids, first_stage)` (arrays; None for an input the request lacks) on one
    Triton request and build its response: SCORES and STATUS, and RERANK_SCORES where the handler gives
    the reranker's own scores apart.

    A malformed request becomes an INVALID_ARG error response; any other failure an INTERNAL one (logged
    with its traceback). Either way only this request fails and the model keeps serving.
    """
    arrays = []
    for name in (QUERY, ITEM_IDS, FIRST_STAGE_SCORES):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        arrays.append(None if tensor is None else tensor.as_numpy())
    try:
        result: RerankResult = handle(*arrays)
    except RequestError as e:
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)
        )
    except Exception as e:
        logger.exception("rerank request failed")
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(
                f"internal error: {type(e).__name__}: {e}", pb_utils.TritonError.INTERNAL
            )
        )
    statuses = np.array([s.value.encode() for s in result.statuses], dtype=np.object_)
    outputs = [pb_utils.Tensor(SCORES, result.scores), pb_utils.Tensor(STATUS, statuses)]
    if result.rerank_scores is not None:
        outputs.append(pb_utils.Tensor(RERANK_SCORES, result.rerank_scores))
    return pb_utils.InferenceResponse(output_tensors=outputs)


def bls_score_full(pb_utils: Any, model_name: str) -> ScoreFull:
    """A `ScoreFull` that asks another model of this server (the full_reranker) through BLS."""

    def score_full(query: str, item_ids: Any) -> list[float]:
        inputs = [
            pb_utils.Tensor(QUERY, np.array([query.encode()], dtype=np.object_)),
            pb_utils.Tensor(ITEM_IDS, np.array([i.encode() for i in item_ids], dtype=np.object_)),
        ]
        response = pb_utils.InferenceRequest(
            model_name=model_name, inputs=inputs, requested_output_names=[SCORES]
        ).exec()
        if response.has_error():
            raise RuntimeError(f"{model_name}: {response.error().message()}")
        # NaN marks a candidate the full model could not score (its STATUS says why)
        return pb_utils.get_output_tensor_by_name(response, SCORES).as_numpy().astype(float).tolist()

    return score_full
