"""A bad value given on the command line is blamed on that setting, not on the YAML file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memrl.config import ConfigError, load_config


@pytest.fixture
def yaml_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("trainer:\n  lr: 1.0e-5\n")
    return path


def test_bad_override_names_the_override_not_the_file(yaml_file):
    with pytest.raises(ConfigError) as err:
        load_config(yaml_file, ["trainer.lr=-1"])
    msg = str(err.value)
    assert "command-line setting trainer.lr=-1" in msg and str(yaml_file) not in msg
    assert msg.startswith("invalid config: trainer.lr: Input should be greater than 0")


def test_bad_value_in_the_file_still_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  lr: -2\n")
    with pytest.raises(ConfigError, match=rf"invalid config in {path}: trainer.lr: .*\(got -2\)"):
        load_config(path, [])
    with pytest.raises(ConfigError) as err:  # both at once: each blamed where it came from
        load_config(path, ["sampling.top_p=3"])
    msg = str(err.value)
    assert "sampling.top_p: Input should be less than or equal to 1 (from the command-line setting " \
           "sampling.top_p=3)" in msg
    assert f"(got -2 in {path})" in msg


def test_section_level_check_blames_the_override_that_broke_it():
    with pytest.raises(ConfigError, match=r"behav_imp_weight_cap .*command-line setting algorithm.behav_imp_weight_cap=3"):
        load_config(None, ["algorithm.behav_imp_weight_cap=3"])


def test_cli_error_for_a_bad_override(yaml_file):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["config", "show", str(yaml_file), "trainer.lr=-1"])
    assert r.exit_code == 2 and "command-line setting trainer.lr=-1" in r.output and str(yaml_file) not in r.output


@pytest.mark.parametrize("override, said", [
    ("trainer.lr=inf", "trainer.lr: Input should be a finite number"),  # every weight NaN after step 1
    ("algorithm.kl_coef=inf", "algorithm.kl_coef: Input should be a finite number"),  # every step skipped, "done"
    ("sampling.temperature=inf", "sampling.temperature: Input should be a finite number"),
    ("trainer.seed=-1", "trainer.seed: Input should be greater than or equal to 0"),  # numpy's refusal, unnamed
    ("sampling.seed=4294967296", "sampling.seed: Input should be less than 4294967296"),
])
def test_a_number_no_run_can_use_is_refused_where_it_is_written(override, said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_config("configs/memagent_grpo.yaml", [override])


@pytest.mark.parametrize("override", ["trainer.grad_clip=inf", "algorithm.clip_ratio_high=inf",
                                      "algorithm.tis_cap=inf", "engine.timeout_s=inf"])
def test_infinity_stays_allowed_where_it_means_no_limit(override):
    load_config("configs/memagent_grpo.yaml", [override])


@pytest.mark.parametrize("override", ["algorithm.n=true", "trainer.lr=true", "trainer.seed=false"])
def test_a_boolean_is_not_taken_as_a_number(override):
    key = override.split("=")[0].split(".")[1]
    with pytest.raises(ConfigError, match=f"{key}: expected a number, got (true|false)"):
        load_config("configs/memagent_grpo.yaml", [override])
    load_config("configs/memagent_grpo.yaml", ["lora.enabled=true", "trainer.tensorboard=false"])  # booleans stay


@pytest.mark.parametrize("override, message", [
    ("data.docs=[50,abc", "override 'data.docs=[50,abc': cannot parse value '[50,abc' as a list: expected ',' or "
                          "']', but got '<stream end>' at column 8"),
    ("workflow.options={chunk_tokens: 10", "override 'workflow.options={chunk_tokens: 10': cannot parse value "
                                           "'{chunk_tokens: 10' as a mapping"),
])
def test_an_unparsable_collection_is_one_line_naming_the_override(override, message):
    """PyYAML's own message is five lines (a caret drawing); the override is named, the problem kept."""
    from memrl.config.load import load_config

    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.path=tiny", override])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_workflow_option_the_file_set_is_not_blamed_on_another_option_given(tmp_path):
    """The agent workflow's program (from the file) cannot be imported: the error names the file and the option
    once, not the unrelated workflow.options.max_tokens given on the command line."""
    path = tmp_path / "agent.yaml"
    path.write_text("workflow:\n  name: agent\n  options:\n    program: no_such_module_here:solve\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["workflow.options.max_tokens=8"])
    msg = str(err.value)
    assert msg.startswith(f"invalid config in {path}: workflow.options.program 'no_such_module_here:solve': cannot")
    assert "max_tokens" not in msg and msg.count("workflow.options.program") == 1
    with pytest.raises(ConfigError) as err:  # given on the command line: blamed on it
        load_config(None, ["workflow.name=agent", "workflow.options.program=no_such_module_here:solve"])
    assert "(from the command-line setting workflow.options.program=no_such_module_here:solve)" in str(err.value)


def test_an_unknown_key_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("trainer:\n  total_step: 1\n")
    with pytest.raises(ConfigError, match=rf"^unknown config key 'trainer.total_step' in {path}: did you mean "
                                          r"'trainer.total_steps'\?$"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"^unknown config key 'trainer.total_step': did you mean"):
        load_config(None, ["trainer.total_step=1"])  # a command-line key: no file to name


def test_a_check_across_options_blames_the_override_it_names():
    """online mode refuses a program or command: the message is placed at workflow.options.mode (set by the file)
    and names `command`, which only the command line set: that setting is blamed, not the file."""
    example = Path(__file__).resolve().parents[2] / "examples" / "online" / "online.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(example, ["workflow.options.command=[sh,x.sh]"])
    msg = str(err.value)
    assert msg.startswith("invalid config: workflow.options.mode online runs no program")
    assert msg.endswith("(from the command-line setting workflow.options.command=[sh,x.sh])")
