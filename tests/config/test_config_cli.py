"""memrl config schema (every field, three formats, workflow options, registry choices) and config show (resolved)."""

import json
import sys
import textwrap

import yaml
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.config import MemRLConfig, load_config
from memrl.config.load import all_keys
from memrl.config.registry import ADV_ESTIMATORS, ENGINES
from memrl.plugins import WORKFLOWS


def run(*args):
    return CliRunner().invoke(app, ["config", *args])


def schema_json(*args):
    r = run("schema", "--format", "json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_every_field_once_with_type_default_and_description():
    rows = schema_json()
    leaves = {k for k in all_keys() if not any(o.startswith(k + ".") for o in all_keys())} - {"workflow.options"}
    plain = [r["key"] for r in rows if r["workflow"] is None]
    assert sorted(plain) == sorted(leaves) and len(plain) == len(set(plain))
    by_key = {r["key"]: r for r in rows if r["workflow"] is None}
    assert by_key["trainer.lr"]["type"] == "float" and by_key["trainer.lr"]["default"] == MemRLConfig().trainer.lr
    assert by_key["algorithm.n"]["bounds"] == ">= 1" and "Episodes per prompt" in by_key["algorithm.n"]["description"]
    assert by_key["data.docs"]["default"] == [50, 100, 200, 400, 800, 1600, 3200, 6400]
    assert by_key["model.dtype"]["type"] == 'one of "auto", "float32", "bfloat16", "float16"'


def test_registered_names_are_listed_with_their_summary():
    by_key = {r["key"]: r for r in schema_json() if r["workflow"] is None}
    adv = by_key["algorithm.adv_estimator"]
    assert list(adv["choices"]) == list(ADV_ESTIMATORS.names) and adv["default"] == "grpo"
    assert adv["choices"]["dr_grpo"].startswith("Dr. GRPO")
    assert list(by_key["engine.kind"]["choices"]) == list(ENGINES.names)
    assert by_key["algorithm.kl_estimator"]["choices"]["low_var_kl"] == "same as k3"


def test_workflow_options_come_from_each_workflow(tmp_path, monkeypatch):
    rows = schema_json()
    assert {r["workflow"] for r in rows if r["workflow"]} == set(WORKFLOWS.names)
    chunk = {r["workflow"]: r["default"] for r in rows if r["key"] == "workflow.options.memory_tokens"}
    assert chunk == {"memagent": 1024, "rememr1": 2048}
    (tmp_path / "my_wf.py").write_text(textwrap.dedent("""
        from pydantic import BaseModel, Field
        from memrl import Workflow

        class Echo(Workflow):
            class Options(BaseModel):
                turns: int = Field(2, ge=1, description="How many times to echo.")

            async def run(self, ep):
                ep.reward(0.0)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_wf", raising=False)
    rows = schema_json("--workflow", "my_wf:Echo")
    mine = [r for r in rows if r["workflow"]]
    assert [(r["key"], r["default"], r["bounds"], r["workflow"]) for r in mine] == [
        ("workflow.options.turns", 2, ">= 1", "my_wf:Echo")]


def test_text_and_markdown():
    text = run("schema").stdout
    assert 'algorithm.adv_estimator: str (registered name or import path) = "grpo"\n' in text
    assert "      rloo: RLOO" in text and "    [workflow rememr1] " in text
    md = run("schema", "-f", "markdown").stdout
    assert "## `algorithm`\n\n| key | type | default | description |\n|---|---|---|---|\n" in md
    assert "## `workflow.options (tool_agent)`" in md
    assert "| `trainer.lr` | float |" in md and "Choices: `grpo` (GRPO:" in md


def test_bad_format_and_workflow_are_one_line():
    r = run("schema", "--format", "yaml")
    assert r.exit_code == 2 and r.stderr.strip() == "error: --format 'yaml': choose text, json, markdown"
    r = run("schema", "--workflow", "memagnet")
    assert r.exit_code == 2 and "unknown workflow 'memagnet'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_show_prints_the_resolved_tree_and_loads_back(tmp_path):
    r = run("show", "workflow.name=rememr1", "workflow.options.chunk_tokens=300", "algorithm.adv_estimator=rloo")
    assert r.exit_code == 0, r.output
    tree = yaml.safe_load(r.stdout)
    opts = tree["workflow"]["options"]
    assert opts["chunk_tokens"] == 300 and opts["memory_tokens"] == 2048 and opts["recall_pool"] == "previous"
    assert tree["algorithm"]["adv_estimator"] == "rloo" and tree["engine"]["kind"] == "hf"
    (tmp_path / "shown.yaml").write_text(r.stdout)
    again = load_config(tmp_path / "shown.yaml")
    assert again.workflow.opts == load_config(None, ["workflow.name=rememr1", "workflow.options.chunk_tokens=300"]
                                              ).workflow.opts
    assert again.algorithm.adv_estimator == "rloo"
