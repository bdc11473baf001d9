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
