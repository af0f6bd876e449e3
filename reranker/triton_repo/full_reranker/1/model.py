"""Triton Python backend of `full_reranker` (the shadow): Triton tensors in and out; the work is in
reranker.serving. Imports the project like gist_reranker (see its model.py)."""

from __future__ import annotations

import json
from typing import Any

import triton_python_backend_utils as pb_utils

from reranker.serving.runtime import (
    FullParams,
    build_full_service,
    configure_logging,
    respond,
    triton_parameters,
)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        configure_logging()
        params = FullParams.parse(triton_parameters(json.loads(args["model_config"])))
        self.service = build_full_service(params)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [respond(pb_utils, self.service.handle, request) for request in requests]
