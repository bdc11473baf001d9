"""``memrl data filter --protocol memagent``: MemAgent's filter.py/filter2.py defaults, prompt and drop rule.

The prompt template is read from MemAgent's ``filter.py`` in ``../shared/originals`` (by memrl from
``--memagent-repo``, by this test with ``ast``); containment is judged by filter.py's own ``contains``
(loaded with stand-ins for its OpenAI client and helpers), the boxed score by memrl's MemAgent reward.
"""

from __future__ import annotations

import ast
import json
import sys
import types

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.data import LongContextSample, read_samples, write_samples
from memrl.models.resolve import load_tokenizer
from memrl.rewards.published import memagent_strict_reward
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import decode, encode_text
from memrl.workflows.templates import apply_chat
from tests.data.paper_originals import MEMAGENT_DATA, ORIGINALS, require_originals

GOLDS = {"q0": ["Paris"], "q1": ["Paris"], "q2": ["Paris"], "q3": ["New York"], "q4": ["Paris"]}
# (model, question) -> replies of the two tries
REPLIES = {
    (0, "q0"): ["\\boxed{Paris}", "x"],                      # base, boxed right on the first try
    (0, "q1"): ["\\boxed{Rome}", "\\boxed{Lyon}"], (1, "q1"): ["no", "I think paris is it"],  # instruct contains
    (0, "q2"): ["\\boxed{Rome}", "no"], (1, "q2"): ["\\boxed{Lyon}", "\\boxed{Nice}"],         # never: kept
    (0, "q3"): ["\\boxed{New York City}", "no"],             # boxed wrong, but contains the gold
    (0, "q4"): ["\\boxed{France}", "no"], (1, "q4"): ["no", "\\boxed{ paris }"],               # instruct boxed
}


def _template() -> str:
    tree = ast.parse((MEMAGENT_DATA / "filter.py").read_text())
    return next(n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "TEMPLATE")


def _original_contains():
    """filter.py's ``contains``, the module loaded with its network clients and helpers stood in for."""
    import importlib.util

    stubs = {"openai": types.SimpleNamespace(AsyncOpenAI=lambda **k: None, OpenAI=lambda **k: None),
             "rich": types.SimpleNamespace(print=print), "fire": types.SimpleNamespace(Fire=None),
             "memory_data": types.ModuleType("memory_data"),
             "memory_data.utils": types.SimpleNamespace(async_main=None),
             "hotpotqa_verifier": types.SimpleNamespace(compute_score=None)}
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)  # type: ignore[arg-type]
    try:
        spec = importlib.util.spec_from_file_location("_original_filter", MEMAGENT_DATA / "filter.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.contains
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _engines(tok, calls):
    """One scripted engine per model, in the order the models are asked."""
    def make(model):
        tries: dict[str, int] = {}

        def reply(prompt, params):
            text = decode(tok, prompt)
            q = next(q for q in GOLDS if f"Question {q}" in text)
            calls.append((model, q, text, params))
            k = tries[q] = tries.get(q, -1) + 1
            return encode_text(tok, REPLIES.get((model, q), ["nothing", "nothing"])[k])
        return ScriptedEngine(reply)
    return iter([make(0), make(1)])


def _run(tmp_path, monkeypatch, *extra, repo=True):
    tok = load_tokenizer("tiny")
    calls: list = []
    engines = _engines(tok, calls)
    monkeypatch.setattr("memrl.engines.factory.build_engine", lambda cfg: next(engines))
    src, out = tmp_path / "train.parquet", tmp_path / "kept.parquet"
    write_samples([LongContextSample(index=i, question=f"Question {q}", answers=g, context="Document 1:\nsecret",
                                     num_docs=1) for i, (q, g) in enumerate(GOLDS.items())], src, schema="train")
    env = {"MEMRL_MEMAGENT_REPO": str(ORIGINALS / "memagent") if repo else None}
    r = CliRunner().invoke(app, ["data", "filter", "--protocol", "memagent", "-i", str(src), "-m", "tiny",
                                 "--instruct-model", "tiny", "-o", str(out), *extra], env=env)
    return r, out, calls, tok


def test_memagent_filter_drops_what_either_model_knew(tmp_path, monkeypatch):
    require_originals()
    contains = _original_contains()
    r, out, calls, tok = _run(tmp_path, monkeypatch)
    assert r.exit_code == 0, r.output
    # the drop rule, reply by reply: MemAgent's boxed score or filter.py's own containment
    expected_dropped = []
    for i, (q, golds) in enumerate(GOLDS.items()):
        replies = [x for m in (0, 1) for x in REPLIES.get((m, q), [])]
        rm = {"ground_truth": golds}
        if any(contains(([x], rm))[0] or memagent_strict_reward(x, golds) for x in replies):
            expected_dropped.append(i)
    assert expected_dropped == [0, 1, 3, 4]
    assert [s.index for s in read_samples(out)] == [2]
    report = json.loads((tmp_path / "kept.parquet.filter.json").read_text())
    assert [d["index"] for d in report["dropped_questions"]] == expected_dropped
    assert (report["protocol"], report["tries"], report["temperature"], report["top_p"], report["max_new_tokens"]) \
        == ("memagent", 2, 1.0, 0.7, 512)
    # MemAgent's defaults on every request, its template as one chat turn, both models twice for a kept question
    assert all((p.temperature, p.top_p, p.max_new_tokens) == (1.0, 0.7, 512) for *_, p in calls)
    assert all(text == decode(tok, encode_text(tok, apply_chat(tok, _template().format(prompt=f"Question {q}"))))
               for _, q, text, _ in calls)
    assert [(m, q) for m, q, *_ in calls if q == "q2"] == [(0, "q2"), (0, "q2"), (1, "q2"), (1, "q2")]
    assert [(m, q) for m, q, *_ in calls if q == "q0"] == [(0, "q0")]  # dropped at once: not asked again


def test_memagent_filter_max_kept_and_missing_checkout(tmp_path, monkeypatch):
    require_originals()
    r, out, _, _ = _run(tmp_path, monkeypatch, "--max-kept", "1", "--tries", "1")
    assert r.exit_code == 0, r.output
    assert len(list(read_samples(out))) == 1
    r, _, _, _ = _run(tmp_path / "b", monkeypatch, repo=False)
    assert r.exit_code == 2 and "--memagent-repo" in r.output and "github.com/BytedTsinghua-SIA/MemAgent" in r.output


def test_memagent_filter_runs_the_tiny_model_end_to_end(tmp_path):
    """A real (tiny, random) model behind both names: the run completes and writes what it kept."""
    require_originals()
    src, out = tmp_path / "eval_1.json", tmp_path / "kept.json"
    write_samples([LongContextSample(index=i, question=f"Where is thing {i}?", answers=["zzqx"], context="c",
                                     num_docs=1) for i in range(2)], src)
    r = CliRunner().invoke(app, ["data", "filter", "--protocol", "memagent", "-i", str(src), "-m", "tiny",
                                 "--instruct-model", "tiny", "--max-new-tokens", "4", "-o", str(out)],
                           env={"MEMRL_MEMAGENT_REPO": str(ORIGINALS / "memagent")})
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "kept.json.filter.json").read_text())
    assert report["models"] == ["tiny", "tiny"] and report["total"] == 2
    assert report["kept"] + report["dropped"] == 2
