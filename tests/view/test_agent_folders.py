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
