"""Client of the GistRank Triton models over HTTP or gRPC (tritonclient)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

import numpy as np
from tritonclient.utils import InferenceServerException

from reranker.serving.requests import FIRST_STAGE_SCORES, ITEM_IDS, QUERY, RERANK_SCORES, SCORES, STATUS
from reranker.serving.server import GIST_MODEL

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


class RerankError(RuntimeError):
    """The server refused or failed the request; the message is the server's."""


@dataclass(frozen=True)
class Candidate:
    item_id: str
    score: float  # the served score (fused when first-stage scores were sent); NaN when `status` is an error
    status: str  # l1 | feast | recompute | full, or an error code (reranker.serving.status.Status)
    rerank_score: float = math.nan  # the reranker's own (gist_reranker); NaN when `status` is an error

    @property
    def scored(self) -> bool:
        return not math.isnan(self.score)


class RerankClient:
    """One connection to a server; `rerank` may be called many times. A context manager."""

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        model: str = GIST_MODEL,
        timeout_s: float = 60.0,
    ) -> None:
        if protocol == "http":
            import tritonclient.http as module

            self._client: Any = module.InferenceServerClient(
                url or DEFAULT_URLS[protocol], connection_timeout=timeout_s, network_timeout=timeout_s
            )
            self._options: dict[str, Any] = {}
        elif protocol == "grpc":
            import tritonclient.grpc as module

            self._client = module.InferenceServerClient(url or DEFAULT_URLS[protocol])
            self._options = {"client_timeout": timeout_s}
        else:
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        self._module = module
        self.model = model

    def rerank(
        self, query: str, item_ids: Sequence[str], first_stage_scores: Sequence[float] | None = None
    ) -> list[Candidate]:
        """One score and status per id, in the order given. With `first_stage_scores` (one per id, the
        first stage's: BM25, ANN) the scores are fused with them by the served model's fusion setting;
        each candidate's `rerank_score` is the reranker's own either way (gist_reranker)."""
        inputs = [self._bytes_input(QUERY, [query]), self._bytes_input(ITEM_IDS, list(item_ids))]
        if first_stage_scores is not None:
            tensor = self._module.InferInput(FIRST_STAGE_SCORES, [len(first_stage_scores)], "FP32")
            tensor.set_data_from_numpy(np.asarray(first_stage_scores, dtype=np.float32).reshape(-1))
            inputs.append(tensor)
        names = [SCORES, STATUS] + ([RERANK_SCORES] if self.model == GIST_MODEL else [])
        outputs = [self._module.InferRequestedOutput(name) for name in names]
        try:
            result = self._client.infer(self.model, inputs, outputs=outputs, **self._options)
        except InferenceServerException as e:
            raise RerankError(e.message() or str(e)) from None
        except OSError as e:  # the HTTP client lets connection errors through as they are
            raise RerankError(f"cannot reach the server: {e}") from None
        scores = result.as_numpy(SCORES)
        statuses = result.as_numpy(STATUS)
        own = result.as_numpy(RERANK_SCORES) if RERANK_SCORES in names else scores
        return [
            Candidate(item_id, float(score), status.decode(), float(rerank))
            for item_id, score, status, rerank in zip(item_ids, scores, statuses, own, strict=True)
        ]

    def _bytes_input(self, name: str, values: list[str]) -> Any:
        tensor = self._module.InferInput(name, [len(values)], "BYTES")
        tensor.set_data_from_numpy(np.array([v.encode() for v in values], dtype=np.object_))
        return tensor

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
