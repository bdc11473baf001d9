"""engine.kind names a registered engine (built-in, decorated or by import path); side models need a side builder."""

import sys
import textwrap

import pytest

from memrl.config import ConfigError, load_config
from memrl.config.registry import ENGINES
from memrl.engines.factory import build_engine, build_side_engine, register_engine, side_engine_kinds
from memrl.engines.openai import OpenAIEngine
from memrl.testing import ScriptedEngine


def test_builtin_kinds_and_side_kinds():
    assert ENGINES.names[:3] == ("hf", "openai", "vllm")
    assert side_engine_kinds()[:2] == ("hf", "openai") and "vllm" not in side_engine_kinds()


def test_unknown_kind_is_one_line_with_the_nearest():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["engine.kind=vlm"])
    msg = str(info.value)
    assert "engine.kind: unknown engine kind 'vlm' (did you mean 'vllm'?): choose hf, openai, vllm" in msg
    assert "\n" not in msg


def test_decorated_kind_builds_by_name():
    made = []

    @register_engine("scripted_test")
    def scripted(cfg, model=None):
        made.append(cfg.trainer.seed)
        return ScriptedEngine(lambda prompt, params: [])

    try:
        cfg = load_config(None, ["engine.kind=scripted_test", "trainer.seed=5"])
        assert isinstance(build_engine(cfg), ScriptedEngine) and made == [5]
        side = load_config(None, ["env.user.model=tiny", "env.user.engine=scripted_test"]).env.user
        with pytest.raises(ValueError, match="env.user.engine: engine kind 'scripted_test' cannot run a side model; "
                                             "choose hf, openai"):
            build_side_engine(cfg, side, "env.user")
    finally:
        ENGINES.remove("scripted_test")


def test_kind_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "my_engines.py").write_text(textwrap.dedent("""
        from memrl.testing import ScriptedEngine

        def echo(cfg, model=None):
            return ScriptedEngine(lambda prompt, params: prompt[-2:])
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_engines", raising=False)
    cfg = load_config(None, ["engine.kind=my_engines:echo"])
    assert isinstance(build_engine(cfg), ScriptedEngine)
    with pytest.raises(ConfigError, match="engine.kind: engine kind 'my_engines:missing': module my_engines has no"):
        load_config(None, ["engine.kind=my_engines:missing"])


def test_openai_builders():
    with pytest.raises(ValueError, match="engine.kind=openai needs engine.base_url"):
        build_engine(load_config(None, ["engine.kind=openai"]))
    cfg = load_config(None, ["engine.kind=openai", "engine.base_url=http://127.0.0.1:9/v1/", "engine.retries=7",
                             "engine.served_model=policy"])
    eng = build_engine(cfg)
    assert isinstance(eng, OpenAIEngine) and (eng.base_url, eng.model, eng.retries) == ("http://127.0.0.1:9/v1",
                                                                                       "policy", 7)
    judge = load_config(None, ["env.judge.model=tiny", "env.judge.engine=openai",
                               "env.judge.base_url=http://127.0.0.1:9/v1"]).env.judge
    side, tok = build_side_engine(cfg, judge, "env.judge")
    assert isinstance(side, OpenAIEngine) and side.model == "tiny" and side.retries == 7 and tok is not None
    with pytest.raises(ValueError, match=r"^env.judge.engine=openai needs env.judge.base_url \(e.g."):
        build_side_engine(cfg, judge.model_copy(update={"base_url": None}), "env.judge")


def test_side_engine_kind_is_validated_on_load():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["env.user.engine=opnai"])
    assert "env.user.engine: unknown engine kind 'opnai' (did you mean 'openai'?)" in str(info.value)
    with pytest.raises(ConfigError, match="env.judge.engine: unknown engine kind"):
        load_config(None, ["env.judge.engine=nope"])


def test_training_refuses_a_kind_that_cannot_receive_weights():
    from memrl.train.preflight import check_config

    with pytest.raises(ConfigError, match=r"^engine.kind=openai cannot receive weight updates; train with "
                                          r"engine.kind=hf or vllm$"):
        check_config(load_config(None, ["engine.kind=openai", "engine.base_url=http://127.0.0.1:9/v1"]), has_samples=True)

    @register_engine("frozen_test", receives_weights=False)
    def frozen(cfg, model=None):
        return ScriptedEngine(lambda prompt, params: [])

    try:
        with pytest.raises(ConfigError, match="engine.kind=frozen_test cannot receive weight updates"):
            check_config(load_config(None, ["engine.kind=frozen_test"]), has_samples=True)
    finally:
        ENGINES.remove("frozen_test")


def test_a_kind_checks_its_own_options_before_training():
    """vLLM's preflight refuses sleep mode under async training (no vLLM needed: it runs before any engine);
    a registered kind's ``preflight`` runs for that kind only."""
    from memrl.train.preflight import check_config

    with pytest.raises(ConfigError, match=r"^trainer.mode=async keeps vLLM generating during updates: use "
                                          r"engine.vllm.sleep=off or auto$"):
        check_config(load_config(None, ["engine.kind=vllm", "trainer.mode=async", "engine.vllm.sleep=on"]),
                     has_samples=True)
    check_config(load_config(None, ["engine.kind=vllm", "trainer.mode=async", "engine.vllm.sleep=auto"]),
                 has_samples=True)
    check_config(load_config(None, ["engine.kind=hf", "trainer.mode=async", "engine.vllm.sleep=on"]),
                 has_samples=True)  # another kind does not read engine.vllm

    seen = []

    @register_engine("checked_test", preflight=lambda cfg: seen.append(cfg.trainer.lr))
    def checked(cfg, model=None):
        return ScriptedEngine(lambda prompt, params: [])

    try:
        check_config(load_config(None, ["engine.kind=checked_test", "trainer.lr=0.5"]), has_samples=True)
        assert seen == [0.5]
    finally:
        ENGINES.remove("checked_test")
