"""Triton Python backend of `gist_reranker`: Triton tensors in and out; the work is in reranker.serving.

The stub process imports the project through PYTHONPATH (repository root + the venv's site-packages),
which `gistrank serve` (reranker/serving/server.py) puts in the server's environment.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from monitoring.serving_metrics import export_through_triton
from reranker.serving.runtime import GistParams, GistRuntime, bls_score_full, initialize_params, respond


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        params = initialize_params(GistParams, args)
        # one process per instance (instance_group count): each labels its series with its own name
        export_through_triton(pb_utils, args["model_instance_name"])
        self.runtime = GistRuntime(params, bls_score_full(pb_utils, params.shadow_model))

    def execute(self, requests: list[Any]) -> list[Any]:
        return [respond(pb_utils, self.runtime.service.handle, request) for request in requests]

    def finalize(self) -> None:
        self.runtime.close()
