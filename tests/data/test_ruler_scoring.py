"""RULER scoring under ``eval.protocol memagent`` equals MemAgent's ``ruler_general.py`` on the same responses.

The golden scores come from MemAgent's own functions (``string_match_all``, ``calc_metrics``,
``calc_qa_metrics`` of ``taskutils/memory_eval/ruler_general.py`` and its ``utils``), loaded
from ``../shared/originals`` inside the test: the script's module-level imports (datasets,
transformers, torch) are not needed, so only its function definitions are compiled.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from memrl.data.ruler_metric import memagent_score
from memrl.eval.ruler_suite import _rescored, protocol_score

from tests.data.ruler_originals import ORIGINALS

EVAL = ORIGINALS / "memagent" / "taskutils" / "memory_eval"


def _memagent() -> dict[str, Any]:
    if not (EVAL / "ruler_general.py").is_file():
        pytest.skip(f"MemAgent's memory_eval is not at {EVAL} (set MEMRL_SHARED_ORIGINALS to run these tests)")
    spec = importlib.util.spec_from_file_location("memagent_eval_utils", EVAL / "utils" / "__init__.py")
    utils = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(utils)
    tree = ast.parse((EVAL / "ruler_general.py").read_text())
    wanted = {"string_match_all", "calc_metrics", "calc_qa_metrics"}
    module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted],
                        type_ignores=[])
    ns: dict[str, Any] = {"update_answer": utils.update_answer}
    exec(compile(module, str(EVAL / "ruler_general.py"), "exec"), ns)
    return {**ns, "utils": utils}


def _their_score(m: dict[str, Any], output: str, answers: list[str], split: str, fmt: str) -> float:
    """get_pred's scoring of one output (api recurrent-boxed for boxed, recurrent for answer_is)."""
    utils = m["utils"]
    extract = utils.extract_boxed_answer if fmt == "boxed" else utils.extract_answer
    response = output.strip()
    pred, _ = utils.extract_solution(response)
    pred = extract(pred) if pred else extract(response)
    if "qa" in split:
        return m["calc_qa_metrics"]([pred], [answers[0]])["sub_em"] if pred else 0
    return m["calc_metrics"]([pred], [answers])["sub_em"] if pred else 0


RESPONSES = [
    "\\boxed{Pa}", "The capital is \\boxed{Paris}.", "<think>\\boxed{Rome}</think>\\boxed{paris, France}",
    "no box here: Paris", "\\boxed{}", "\\boxed{the}", "\\boxed{1234567 and 7654321}", "\\boxed{1234567}",
    "Therefore, the answer is Paris.", "Therefore, the answer is 1234567, 7654321", "<think>x</think>",
    "\\boxed{ABCDE BCDEF}", "\\boxed{abcde, bcdef, cdefg}",
]
GOLDS = {"qa_2": [["Paris"], ["Paris", "France"], ["Paris, France"], ["the Louvre"]],
         "niah_multivalue": [["1234567", "7654321", "1111111"], ["1234567"]],
         "vt": [["ABCDE", "BCDEF", "CDEFG"]]}


@pytest.mark.parametrize("fmt", ["boxed", "answer_is"])
def test_memagent_scores_equal_ruler_general(fmt: str) -> None:
    m = _memagent()
    compared = 0
    for split, gold_sets in GOLDS.items():
        metric = "string_match_part" if split.startswith("qa") else "string_match_all"
        for golds in gold_sets:
            for response in RESPONSES:
                want = _their_score(m, response, golds, split, fmt)
                got = memagent_score(metric, response, golds, fmt)[1]
                assert got == pytest.approx(float(want), abs=1e-12), (split, golds, response)
                compared += 1
    assert compared == 7 * len(RESPONSES)


def test_memagent_qa_is_sub_em_on_the_first_gold() -> None:
    """The issue's example: "Pa" against ["Paris"] scores 1 under MemAgent's protocol, 0 under RULER's."""
    info = {"final_text": "\\boxed{Pa}", "answer": "Pa", "answers": ["Paris"]}
    assert protocol_score(info, "string_match_part", ["Paris"], "memagent")[1] == 1.0
    assert protocol_score(info, "string_match_part", ["Paris"], "memrl")[1] == 0.0
    # only the first gold counts
    assert memagent_score("string_match_part", "\\boxed{France}", ["Paris", "France"])[1] == 0.0


def test_episodes_are_rescored_when_the_protocol_changes() -> None:
    episode = {"metric": "string_match_part", "prediction": "Pa", "ruler_score": 0.0, "protocol": "memrl",
               "info": {"final_text": "\\boxed{Pa}", "answer": "Pa", "answers": ["Paris"]}}
    again = _rescored(episode, "memagent", "boxed")
    assert again["ruler_score"] == 1.0 and again["protocol"] == "memagent"
    assert _rescored(episode, "memrl", "boxed") == episode  # recomputed from its text: the same under memrl


def test_ruler_protocol_files_ask_the_agent_the_prompt_without_its_haystack(tmp_path: Path) -> None:
    """RULER's ``input`` embeds the haystack; the agent is asked ``question`` and episodes are named by line."""
    from memrl.data import LongContextSample
    from memrl.data.longctx import SampleWriter
    from memrl.data.stream import read_samples_lazily
    from memrl.eval.ruler_suite import agent_sample

    path = tmp_path / "ruler_niah_single_1_4096.jsonl"
    with SampleWriter(path, fmt="jsonl") as w:
        w.write(LongContextSample(index=812, question="Find it.\nHAY\nWhat is it?", answers=["1"], context="HAY",
                                  num_docs=1, extra={"question": "Find it.\n\nWhat is it?"}))
    sample = agent_sample(next(iter(read_samples_lazily(path))), 0)
    assert (sample.question, sample.index, sample.context) == ("Find it.\n\nWhat is it?", 0, "HAY")
