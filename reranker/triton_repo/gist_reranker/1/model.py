"""Triton Python backend of `gist_reranker`: Triton tensors in and out; the work is in reranker.serving.

The stub process imports the project through PYTHONPATH (repository root + the venv's site-packages),
which `gistrank serve` (reranker/serving/server.py) puts in the server's environment.
"""

from __future__ import annotations

import json
from typing import Any

import triton_python_backend_utils as pb_utils

from reranker.serving.runtime import (
    GistParams,
    GistRuntime,
    bls_score_full,
    configure_logging,
    respond,
    triton_parameters,
)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        configure_logging()
        params = GistParams.parse(triton_parameters(json.loads(args["model_config"])))
        self.runtime = GistRuntime(params, bls_score_full(pb_utils, params.shadow_model))

    def execute(self, requests: list[Any]) -> list[Any]:
        return [respond(pb_utils, self.runtime.service.handle, request) for request in requests]

    def finalize(self) -> None:
        self.runtime.close()
