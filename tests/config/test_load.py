import pytest

from memrl.config import ConfigError, dump_config, load_config, parse_value


@pytest.mark.parametrize(
    "text, value",
    [("1e-6", 1e-6), ("3", 3), ("[50,100]", [50, 100]), ("[a, b]", ["a", "b"]), ("true", True),
     ("null", None), ("no", "no"), ("path/to/model", "path/to/model"), ('"42"', "42")],
)
def test_parse_value(text, value):
    assert parse_value(text) == value


def test_overrides_apply_and_coerce():
    cfg = load_config(None, ["trainer.lr=1e-6", "data.docs=[50,100]", "model.path=123"])
    assert cfg.trainer.lr == 1e-6
    assert cfg.data.docs == [50, 100]
    assert cfg.model.path == "123"


def test_yaml_file_then_overrides(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("trainer:\n  lr: 3.0e-6\n  seed: 7\ndata:\n  docs: [50]\n")
    cfg = load_config(f, ["trainer.seed=8"])
    assert (cfg.trainer.lr, cfg.trainer.seed, cfg.data.docs) == (3e-6, 8, [50])
    assert "lr: 3.0e-06" in dump_config(cfg)


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.lrr=1", "unknown config key 'trainer.lrr': did you mean 'trainer.lr'?"),
        ("trainr.lr=1", "unknown config key 'trainr': did you mean 'trainer'?"),
        ("data.lr=1", "unknown config key 'data.lr': did you mean 'trainer.lr'?"),
        ("trainer.lr=abc", "trainer.lr"),
        ("trainer.lr=-1", "trainer.lr"),
        ("data.docs=[0]", "data.docs"),
        ("nonsense", "key=value"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_unknown_key_in_yaml_is_reported_with_path(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("trainer:\n  learning_rate: 1.0e-6\n")
    with pytest.raises(ConfigError, match="unknown config key 'trainer.learning_rate'"):
        load_config(f)
    f.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(f)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_example_configs_load():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml")):
        cfg = load_config(path)
        from memrl.plugins import WORKFLOWS

        assert cfg.workflow.name in WORKFLOWS.names


@pytest.mark.parametrize("text, said", [
    ("trainer:\n  lr: 1.0e-5\nalgorithm:\n  n: 4\ntrainer:\n  lr: 2.0e-6\n",
     "key 'trainer' appears twice in one section (YAML would keep only the last) at line 5, column 1"),
    ("trainer:\n  lr: 1.0e-5\n  lr: 2.0e-6\n", "key 'lr' appears twice in one section"),
    ("a: [1\n", "expected ',' or ']', but got '<stream end>' (while parsing a flow sequence) at line 2, column 1"),
])
def test_a_yaml_mistake_is_one_line_with_its_place(tmp_path, text, said):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert said in str(err.value)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}: not valid YAML: ")


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes("model:\n  path: tiny\n".encode("utf-16"))  # what PowerShell's > writes
    with pytest.raises(ConfigError, match=r"exp.yaml: not UTF-8 text \(byte 0: .*\); save it as UTF-8$"):
        load_config(path)
