"""Folders of the agent workflow (and any workflow with required options) open in the viewer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from memrl.view.grading import folder_grader
from memrl.view.loader import load_payload


@pytest.mark.parametrize("name", ["eval_config.yaml", "config.yaml"])
def test_an_agent_folder_is_viewed_without_building_its_workflow(tmp_path: Path, name: str) -> None:
    # options the viewer's machine cannot satisfy: a program module that is not installed here
    options = {"program": "not_installed_here.agent:solve"} if name == "config.yaml" else {"command": ["a"]}
    (tmp_path / name).write_text(yaml.safe_dump({"workflow": {"name": "agent", "options": options},
                                                 "model": {"path": "tiny"}}))
    (tmp_path / "episodes").mkdir()
    (tmp_path / "episodes" / "0.json").write_text(json.dumps({"sample": 0, "reward": 1.0, "metrics": {},
                                                              "info": {}, "seconds": 0.1}))
    warnings: list[str] = []
    assert folder_grader(tmp_path, warnings.append) is None  # the agent workflow is not graded by env
    payload = load_payload(tmp_path, warn=warnings.append)
    assert payload["kind"] == "eval" and len(payload["episodes"]) == 1 and not warnings


def test_a_tool_agent_folder_still_gets_its_grader(tmp_path: Path) -> None:
    (tmp_path / "eval_config.yaml").write_text(yaml.safe_dump({
        "workflow": {"name": "tool_agent", "options": {}}, "env": {"domain": "library", "eval_split": "test"}}))
    assert folder_grader(tmp_path, print) is not None


CALLED: list[int] = []


def _embed(texts):  # what a foreign folder's config could name as its embedder
    CALLED.append(len(texts))
    raise AssertionError("the viewer ran code a viewed folder named")


def test_a_viewed_folder_never_names_code_urls_or_keys_for_the_viewer(tmp_path: Path, tau2_dir: Path,
                                                                       monkeypatch) -> None:
    """A folder's banking_knowledge tool options can name an embedder ``module:function`` (run at once on the
    documents) or an endpoint and an environment variable to send as its key: viewing it runs and sends none."""
    if not (tau2_dir / "banking_knowledge" / "documents").is_dir():
        pytest.skip(f"no banking_knowledge data in {tau2_dir}")
    monkeypatch.setenv("MEMRL_TEST_PRIVATE_KEY", "sk-private")
    opts = {"retrieval_variant": "openai_embeddings", "embedder": f"{__name__}:_embed",
            "embedder_base_url": "http://127.0.0.1:9/v1", "embedder_api_key_env": "MEMRL_TEST_PRIVATE_KEY",
            "top_k": 3}
    (tmp_path / "eval_config.yaml").write_text(yaml.safe_dump({
        "workflow": {"name": "tool_agent", "options": {}},
        "env": {"domain": "banking_knowledge", "data_dir": str(tau2_dir), "tool_options": opts}}))
    warnings: list[str] = []
    grader = folder_grader(tmp_path, warnings.append)
    assert grader is not None and CALLED == []
    assert grader.domain.tool_options == {"top_k": 3}  # a size is a switch; text options are not applied
    assert len(warnings) == 1 and "embedder, embedder_api_key_env, embedder_base_url, retrieval_variant" in warnings[0]
