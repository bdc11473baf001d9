"""Nested sections: env.user / env.judge (side models), trainer.eval, trainer.async; old flat keys still load."""

from __future__ import annotations

import pytest
import yaml

from memrl.config import ConfigError, MemRLConfig, dump_config, load_config
from memrl.config import renames
from memrl.train.preflight import check_run_config


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    monkeypatch.setattr(renames, "_NOTICED", set())  # each notice is printed once per process


def test_old_flat_keys_in_a_file_load_nested_with_a_notice(tmp_path, capsys):
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump({"env": {"user_model": "tiny", "user_api_key_env": "MY_KEY", "nl_judge_max_tokens": 9},
                                 "trainer": {"eval_every": 5, "eval_n": 4, "max_staleness": 2}}))
    cfg = load_config(f)
    assert (cfg.env.user.model, cfg.env.user.api_key_env, cfg.env.judge.max_tokens) == ("tiny", "MY_KEY", 9)
    assert cfg.env.judge.api_key_env == "MY_KEY"  # the judge used the user simulator's key variable
    assert (cfg.trainer.eval.every, cfg.trainer.eval.n, cfg.trainer.async_.max_staleness) == (5, 4, 2)
    err = capsys.readouterr().err
    assert "env.user_model is now env.user.model" in err and "trainer.max_staleness is now trainer.async" in err
    dumped = yaml.safe_load(dump_config(cfg))
    assert dumped["trainer"]["async"]["max_staleness"] == 2 and "eval_every" not in dumped["trainer"]
    assert load_config(None, [f"{k}={v}" for k, v in (("trainer.async.partial_chunk_tokens", 4),)]) \
        .trainer.async_.partial_chunk_tokens == 4


def test_old_names_still_read_and_typos_name_the_new_place():
    cfg = load_config(None, ["trainer.eval_every=3", "env.nl_judge_model=tiny"])
    assert cfg.trainer.eval_every == 3 and cfg.env.nl_judge_model == "tiny"  # old attribute reads
    with pytest.raises(AttributeError):
        cfg.trainer.eval_evry  # noqa: B018 - a name that never existed still fails
    with pytest.raises(ConfigError, match="did you mean 'trainer.async'"):
        load_config(None, ["trainer.asyn.max_staleness=1"])
    with pytest.raises(ConfigError, match="trainer.eval.n"):
        load_config(None, ["trainer.eval_n=0"])


def test_a_run_recorded_with_old_keys_resumes_and_nested_keys_can_be_allowed(tmp_path):
    from memrl.train import checkpoint

    run = tmp_path / "run"
    run.mkdir()
    old = MemRLConfig().model_dump(mode="json")
    old["trainer"].pop("eval")
    old["trainer"].pop("async")
    old["trainer"].update(eval_every=0, eval_n=1, max_staleness=1, output_dir=str(run))
    (run / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = load_config(None, [f"trainer.output_dir={run}"])
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    if not checkpoint.checkpoints(run):
        pytest.skip("checkpoint layout changed: this test needs a folder that counts as a checkpoint")
    check_run_config(cfg, run, notice=lambda m: None)  # the upgrade alone is not a change
    changed = load_config(None, [f"trainer.output_dir={run}", "trainer.eval.n=4"])
    with pytest.raises(ConfigError, match="changed: trainer.eval.n"):
        check_run_config(changed, run, notice=lambda m: None)
    allowed = load_config(None, [f"trainer.output_dir={run}", "trainer.eval.n=4",
                                 "trainer.allow_changes=[trainer.eval.n]"])
    seen: list[str] = []
    check_run_config(allowed, run, notice=seen.append)
    assert seen and "trainer.eval.n changed from 1 to 4" in seen[0]
    with pytest.raises(ConfigError, match="not a setting"):
        load_config(None, ["trainer.allow_changes=[trainer.eval.nope]"])


@pytest.mark.parametrize("old, new", [("trainer.eval_every", "trainer.eval.every"),
                                      ("workflow.chunk_tokens", "workflow.options.chunk_tokens")])
def test_an_old_and_a_new_name_given_together_are_refused_naming_both(tmp_path, old, new):
    def nested(key: str, value: int) -> dict:
        head, _, rest = key.partition(".")
        return {head: nested(rest, value)} if rest else {key: value}

    raw = nested(old, 3)
    for section, body in nested(new, 5).items():  # both spellings in one file
        for k, v in body.items():
            raw[section][k] = v
    f = tmp_path / "both.yaml"
    f.write_text(yaml.safe_dump(raw))
    both = f"{old} and {new} are the same setting"
    with pytest.raises(ConfigError, match=both):
        load_config(f)
    for overrides in ([f"{old}=3", f"{new}=5"], [f"{new}=5", f"{old}=3"]):  # both on the command line
        with pytest.raises(ConfigError, match=both):
            load_config(None, overrides)
    with pytest.raises(ValueError, match=both):  # a dict given to memrl.Trainer
        MemRLConfig.model_validate(raw)
    f.write_text(yaml.safe_dump(nested(old, 3)))  # the file's old key, overridden by the new one: the override wins
    assert load_config(f, [f"{new}=5"]).model_dump(mode="json")[new.split(".")[0]] == \
        load_config(None, [f"{new}=5"]).model_dump(mode="json")[new.split(".")[0]]


def test_a_misspelt_flat_workflow_key_suggests_the_option():
    with pytest.raises(ConfigError, match=r"'workflow.chunk_tokns': did you mean 'workflow.options.chunk_tokens'\?"):
        load_config(None, ["workflow.chunk_tokns=3"])
    with pytest.raises(ConfigError, match=r"did you mean 'workflow.name'\?"):
        load_config(None, ["workflow.nam=memagent"])
