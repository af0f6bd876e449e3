"""Triton Python backend of `full_reranker` (the shadow): Triton tensors in and out; the work is in
reranker.serving. Imports the project like gist_reranker (see its model.py)."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from reranker.serving.runtime import FullParams, build_full_service, initialize_params, respond


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.service = build_full_service(initialize_params(FullParams, args))

    def execute(self, requests: list[Any]) -> list[Any]:
        return [respond(pb_utils, self.service.handle, request) for request in requests]
