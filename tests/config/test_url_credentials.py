"""A user name or password inside a server URL is a secret: refused in configs (which are written to
config.yaml and trackers), and never shown by an engine's messages."""

from __future__ import annotations

import pytest

from memrl.config import MemRLConfig
from memrl.config.load import ConfigError, load_config
from memrl.io.urls import masked, shown_url


def test_shown_and_masked_urls_hide_only_the_credentials() -> None:
    assert shown_url("http://alice:hunter2@10.0.0.1:8000/v1") == "http://***@10.0.0.1:8000/v1"
    assert shown_url("https://token@host/v1?x=1") == "https://***@host/v1?x=1"
    assert shown_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert masked("engine.base_url=http://a:b@h/v1 and https://c@d/x, mail me@example.org") == \
        "engine.base_url=http://***@h/v1 and https://***@d/x, mail me@example.org"


def _config(section: str, url: str) -> dict:
    extra = {"engine": {"kind": "openai"}, "teacher": {"engine": "openai", "model": "t"}}.get(section, {})
    if section in ("user", "judge"):
        return {"model": {"path": "tiny"}, "env": {section: {"base_url": url}}}
    return {"model": {"path": "tiny"}, section: {**extra, "base_url": url}}


@pytest.mark.parametrize("section", ["engine", "teacher", "user", "judge"])
def test_a_config_url_with_credentials_is_refused(section: str) -> None:
    with pytest.raises(ValueError, match="holds a user name or password") as err:
        MemRLConfig.model_validate(_config(section, "http://alice:hunter2@10.0.0.1:8000/v1"))
    assert "hunter2" not in str(err.value).split("input_value")[0]
    MemRLConfig.model_validate(_config(section, "http://10.0.0.1:8000/v1"))


def test_the_command_line_error_never_echoes_the_password(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {path: tiny}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg, ["engine.kind=openai", "engine.base_url=http://alice:hunter2@h/v1"])
    assert "hunter2" not in str(err.value) and "engine.base_url=http://***@h/v1" in str(err.value)


def test_an_engine_built_by_hand_never_shows_them() -> None:
    from memrl.engines.openai import OpenAIEngine

    engine = OpenAIEngine(base_url="http://alice:hunter2@127.0.0.1:9/v1", model="m")
    assert "hunter2" not in repr(engine) and "***@127.0.0.1:9" in repr(engine)


def test_a_banking_endpoint_with_credentials_is_refused() -> None:
    from memrl.envs.domain import load_domain

    with pytest.raises(ValueError, match=r"env.tool_options.embedder_base_url: http://\*\*\*@h/v1 holds") as err:
        load_domain("banking_knowledge", None, tool_options={"embedder_base_url": "http://a:secret@h/v1"})
    assert "secret" not in str(err.value)
