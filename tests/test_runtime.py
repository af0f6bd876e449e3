"""reranker/serving/runtime.py: the model parameters of the shipped Triton configs parse as the runtime's."""

from __future__ import annotations

import pytest

from reranker.core.checkpoints import DEFAULT_MODEL, default_shadow
from reranker.serving.runtime import FullParams, GistParams
from reranker.serving.server import FULL_MODEL, GIST_MODEL, TEMPLATE_REPO, ServerSettings, read_parameters


def test_config_parameters_are_exactly_the_runtime_parameters() -> None:
    gist = read_parameters((TEMPLATE_REPO / GIST_MODEL / "config.pbtxt").read_text())
    full = read_parameters((TEMPLATE_REPO / FULL_MODEL / "config.pbtxt").read_text())
    params = GistParams.parse(gist)
    assert params.kafka_bootstrap_servers == "" and 0 < params.shadow_rate < 0.1
    FullParams.parse(full)
    # used as is (`tritonserver --model-repository`): the default model, checked by its own shadow
    assert gist["model_path"] == DEFAULT_MODEL and full["model_path"] == default_shadow(DEFAULT_MODEL)
    with pytest.raises(ValueError, match=r"unknown \['typo'\], missing \['l1_ttl_s'\]"):
        GistParams.parse({**{k: v for k, v in gist.items() if k != "l1_ttl_s"}, "typo": "1"})
    with pytest.raises(ValueError, match="l1_bytes='lots' is not a valid int"):
        GistParams.parse({**gist, "l1_bytes": "lots"})


def test_parameters_name_secrets_by_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `gistrank serve` writes into the config holds no URL; the model process expands the reference
    from its environment, and an unset one fails the load with its name."""
    settings = ServerSettings(
        model_path="m", catalog_url="postgresql://app:pw@db/c", redis_url="redis://:pw@r"
    )
    gist = settings.parameters()[GIST_MODEL]
    assert "pw" not in str(settings.parameters())
    with pytest.raises(ValueError, match=r"catalog_url refers to \$\{GISTRANK_SERVE_CATALOG_URL\}, which is"):
        GistParams.parse(gist | {"compress_batch": "4", "shadow_model": FULL_MODEL})
    for name, value in settings.secret_env().items():
        monkeypatch.setenv(name, value)
    params = GistParams.parse(gist | {"compress_batch": "4", "shadow_model": FULL_MODEL})
    assert (params.catalog_url, params.redis_url) == ("postgresql://app:pw@db/c", "redis://:pw@r")
