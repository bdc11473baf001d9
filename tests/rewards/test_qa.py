"""QA rewards, checked by hand against the HotpotQA evaluator's definitions."""

import pytest

from memrl.rewards.qa import (
    exact_match,
    extract_boxed,
    f1_prf,
    f1_score,
    normalize_answer,
    score_answer,
    score_response,
    sub_exact_match,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  A  an   THE cat's  ", "cats"),
        ("theater", "theater"),  # articles only as whole words
        ("state-of-the-art", "stateoftheart"),  # punctuation goes first, so 'the' is glued
        ("1,000 km.", "1000 km"),
        ("Café Müller", "café müller"),  # unicode letters kept
        ("“quoted” São Paulo—city", "“quoted” são paulo—city"),  # only ASCII punctuation stripped
        ("", ""),
        ("A", ""),
        (None, ""),
        ("Tab\tand\nnewline", "tab and newline"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is \\boxed{Paris}.", "Paris"),
        ("\\boxed{a} then \\boxed{b}", "b"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed {Paris}", "Paris"),
        ("\\boxed\n{Paris}", "Paris"),
        ("\\boxed{ Paris }", "Paris"),
        ("\\boxed{a{b}c}", "a{b}c"),
        ("}{\\boxed{x}}}", "x"),
        ("\\boxed{Paris} and a stray \\boxed", "Paris"),
        ("\\boxed{São Paulo}", "São Paulo"),
        ("\\boxed{}", ""),
        ("no box here", None),
        ("", None),
        (None, None),
        ("\\boxed{a} and \\boxed{unclosed", None),  # truncated last box -> no answer
        ("\\boxed{{{", None),
        ("boxed{Paris}", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_exact_match():
    assert exact_match("The Beatles", "beatles") == 1.0
    assert exact_match("Beatles band", "beatles") == 0.0
    assert exact_match(None, "x") == 0.0
    # Both sides normalise to ''; the official script says equal (1.0), memrl says 0: an empty gold is
    # a broken label, and scoring it would reward an empty answer (see the empty-gold test below).
    assert exact_match("the", "a") == 0.0


def test_sub_exact_match():
    assert sub_exact_match("It was the Eiffel Tower, in Paris", "Eiffel Tower") == 1.0
    assert sub_exact_match("Tower", "Eiffel Tower") == 0.0
    assert sub_exact_match("Tower", "Eiffel Tower", bidirectional=True) == 1.0
    assert sub_exact_match("", "Paris") == 0.0
    assert sub_exact_match("", "Paris", bidirectional=True) == 1.0  # why it is not the default
    assert sub_exact_match(None, "Paris", bidirectional=True) == 0.0


def test_f1_hand_values():
    # pred [eiffel, tower, in, paris] vs gold [eiffel, tower]: P=1/2, R=1 -> F1=2/3
    f1, p, r = f1_prf("the Eiffel Tower in Paris", "Eiffel Tower")
    assert (p, r) == (0.5, 1.0)
    assert f1 == pytest.approx(2 / 3)
    # repeated tokens count with multiplicity: common {y: 2} -> P=R=2/3
    assert f1_score("x y y", "y y z") == pytest.approx(2 / 3)
    assert f1_score("Paris", "paris.") == 1.0
    assert f1_score("", "Paris") == 0.0
    assert f1_score(None, "Paris") == 0.0
    assert f1_score("the", "a") == 0.0  # no tokens on either side


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("yes", "no", 0.0),
        ("yes", "yes", 1.0),
        ("Yes.", "yes", 1.0),
        ("yes it is", "yes", 0.0),  # gold is yes/no and pred differs -> 0, no partial credit
        ("no", "no way", 0.0),  # pred is yes/no and differs
        ("noanswer", "paris", 0.0),
    ],
)
def test_f1_yes_no_rule(pred, gold, expected):
    assert f1_score(pred, gold) == expected


def test_score_answer_max_over_golds():
    s = score_answer("Tour Eiffel", ["Eiffel Tower", "Tour Eiffel"])
    assert (s.em, s.sub_em, s.f1, s.answered) == (1.0, 1.0, 1.0, True)
    s = score_answer("Eiffel", ["Eiffel Tower", "Gustave Eiffel tower"])
    assert s.em == 0.0 and s.sub_em == 0.0
    assert s.f1 == pytest.approx(2 / 3)  # P=1, R=1/2 against the first gold
    assert score_answer("x", "x").em == 1.0  # a single string gold is accepted
    with pytest.raises(ValueError):
        score_answer("x", [])


def test_score_response_uses_last_box():
    s = score_response("draft \\boxed{London} final \\boxed{The Eiffel Tower}", ["Eiffel Tower"])
    assert s.em == 1.0 and s.answered
    s = score_response("I think it is Paris", ["Paris"])  # no box -> no answer, all zero
    assert (s.em, s.sub_em, s.f1, s.answered) == (0.0, 0.0, 0.0, False)


@pytest.mark.parametrize("gold", ["", "   ", "The", "a."])
@pytest.mark.parametrize("prediction", ["Paris", "", "the"])
def test_a_gold_that_normalises_to_nothing_never_scores(gold, prediction):
    # "" is a substring of every answer: scoring it would reward anything boxed (a reward hack)
    assert exact_match(prediction, gold) == 0.0
    assert sub_exact_match(prediction, gold) == 0.0
    assert sub_exact_match(prediction, gold, bidirectional=True) == 0.0
    assert f1_score(prediction, gold) == 0.0
    scores = score_response(f"\\boxed{{{prediction}}}", [gold])
    assert (scores.em, scores.sub_em, scores.f1) == (0.0, 0.0, 0.0) and scores.answered
    assert score_response("\\boxed{Paris}", [gold, "paris"]).em == 1.0  # a real gold beside it still counts
