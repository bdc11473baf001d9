"""Re-scoring an eval folder under another ``--protocol`` re-uses its episodes without repeating the
sampling flags (as the README promises: it "costs nothing")."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from memrl.config import load_config
from memrl.eval.runner import with_eval_sampling
from tests.eval.helpers import needle_eval_dir

ARGS = ["workflow.chunk_tokens=200", "workflow.memory_tokens=3", "workflow.final_tokens=3"]


def invoke(*args: object):
    from memrl.cli.main import app

    return CliRunner().invoke(app, list(map(str, args)))


def test_rescore_under_another_protocol_runs_nothing_again(tmp_path):
    data = needle_eval_dir(tmp_path / "data", count=2)
    out = tmp_path / "out"
    base = ["eval", "--model", "tiny", "--workflow", "memagent", "--data", data, "--docs", "3", "--out", out, *ARGS]
    r = invoke(*base)
    assert r.exit_code == 0, r.output
    before = {p.name: p.read_text() for p in (out / "episodes" / "3").iterdir()}
    for protocol in ("memagent", "rememr1", "memrl"):
        r = invoke(*base, "--protocol", protocol)
        assert r.exit_code == 0, r.output
        assert "resuming: 2 of 2 episodes already done" in r.output
        text = " ".join(r.output.split())
        assert ("memrl's own wording of the prompts" in text) == (protocol != "memrl")  # memrl data prompts ...
        # the greedy episodes are scored as the paper's script scores, and said not to be the client's sampling
        assert ("sampled at temperature 0, top_p 1, slot_fill=ids; --protocol" in text) == (protocol != "memrl")
        results = json.loads((out / "results.json").read_text())
        assert results["protocol"] == protocol and results["sampling"]["temperature"] == 0.0
        assert "Sampled at temperature 0, top_p 1, slot_fill ids." in (out / "results.md").read_text()
    assert {p.name: p.read_text() for p in (out / "episodes" / "3").iterdir()} == before


def test_a_folder_run_under_a_published_protocol_is_rescored_under_memrl(tmp_path):
    """Its recorded client options (slot_fill=text, whole questions) are kept: the folder was refused as "a
    different config" when memrl's defaults replaced them."""
    data = needle_eval_dir(tmp_path / "data", count=2)
    out = tmp_path / "out"
    base = ["eval", "--model", "tiny", "--workflow", "memagent", "--data", data, "--docs", "3", "--out", out, *ARGS]
    r = invoke(*base, "--protocol", "memagent")
    assert r.exit_code == 0, r.output
    before = {p.name: p.read_text() for p in (out / "episodes" / "3").iterdir()}
    r = invoke(*base, "--protocol", "memrl")
    assert r.exit_code == 0, r.output
    assert "resuming: 2 of 2 episodes already done" in r.output
    assert json.loads((out / "results.json").read_text())["protocol"] == "memrl"
    assert {p.name: p.read_text() for p in (out / "episodes" / "3").iterdir()} == before


def test_folder_settings_fill_defaults_but_never_override_what_is_given():
    recorded = {"sampling": {"temperature": 0.0, "top_p": 1.0}, "workflow": {"name": "memagent", "slot_fill": "ids"}}
    cfg = with_eval_sampling(load_config(None, ["eval.protocol=memagent"]), recorded)
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.workflow.slot_fill) == (0.0, 1.0, "ids")
    cfg = with_eval_sampling(load_config(None, ["eval.protocol=memagent", "sampling.temperature=0.3"]), recorded)
    assert cfg.sampling.temperature == 0.3  # an explicit value wins (and check_resume refuses the mix)
    fresh = with_eval_sampling(load_config(None, ["eval.protocol=memagent"]))  # a new folder: the paper's defaults
    assert (fresh.sampling.temperature, fresh.sampling.top_p, fresh.workflow.slot_fill) == (0.7, 0.95, "text")


def test_under_memrl_a_yaml_change_of_a_protocol_option_is_a_change(tmp_path):
    """The recorded folder's options fill only what nobody chose; under memrl a YAML value is a choice, so a
    changed max_chunks is a different config (it was silently replaced by the recorded one)."""
    from memrl.config import MemRLConfig

    recorded = {"workflow": {"name": "memagent", "options": {"max_chunks": 1}}}
    cfg = MemRLConfig.model_validate({"workflow": {"name": "memagent", "options": {"max_chunks": 5}}})
    assert with_eval_sampling(cfg, recorded, set()).workflow.max_chunks == 5
    published = MemRLConfig.model_validate({"eval": {"protocol": "memagent"},
                                            "workflow": {"name": "memagent", "options": {"max_chunks": 5}}})
    assert with_eval_sampling(published, recorded, set()).workflow.max_chunks == 1  # a training budget: the folder's


def test_rememr1s_protocol_on_memrls_variant_says_so():
    from memrl.eval.protocol_settings import variant_note

    base = ["eval.protocol=rememr1", "workflow.name=rememr1"]
    assert "rememr1_variant=released" in variant_note(load_config(None, base))
    assert variant_note(load_config(None, [*base, "workflow.options.rememr1_variant=released"])) is None
    assert variant_note(load_config(None, ["eval.protocol=rememr1", "workflow.name=memagent"])) is None
