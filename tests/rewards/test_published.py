"""MemAgent/ReMemR1 scoring, checked by hand against what their public scripts compute."""

import pytest

from memrl.rewards.published import (
    after_think,
    check_answer_format,
    extract_answer,
    extract_answer_is,
    math_normalize,
    memagent_strict_reward,
    score_protocol,
    score_published,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Therefore, the answer is Paris.", "Paris"),
        ("the answer is **Paris**.", "Paris"),  # markdown stars removed
        ("the answer is A. Later, the answer is B.", "B"),  # last occurrence
        ("The answer is Paris.", None),  # case-sensitive, as the original
        ("the answer is Paris.\nHope this helps", "Paris.\nHope this helps"),  # the whole tail is kept
        ("the answer is  ...  ", ""),
        ("no phrase", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer_is(text, expected):
    assert extract_answer_is(text) == expected


def test_extract_answer_formats():
    text = "Answer: Rome\n...\nAnswer: Paris \\boxed{Lyon}"
    assert extract_answer(text, "boxed") == "Lyon"
    assert extract_answer(text, "regex:Answer: (\\w+)") == "Paris"  # last match, first group
    assert extract_answer(text, "regex:Answer: \\w+") == "Answer: Paris"  # whole match without a group
    assert extract_answer("nothing", "regex:Answer: (\\w+)") is None
    assert check_answer_format("answer_is") == "answer_is"
    with pytest.raises(ValueError):
        check_answer_format("regex:(")
    with pytest.raises(ValueError):
        check_answer_format("json")


def test_after_think():
    assert after_think("<think>x</think> \\boxed{a}") == "\\boxed{a}"
    assert after_think("<think>\\boxed{a}</think>  ") == "<think>\\boxed{a}</think>  "  # nothing after: whole text
    assert after_think("plain") == "plain"


# (prediction in the box, golds, EM, sub-EM, F1), each value worked out by hand.
PUBLISHED_CASES = [
    ("Paris", ["Paris"], 1.0, 1.0, 1.0),
    ("Paris", ["Paris, France"], 0.0, 1.0, 0.67),  # prediction inside gold counts; F1 = 2*1*0.5/1.5
    ("Paris, France", ["Paris"], 0.0, 1.0, 0.67),  # gold inside prediction
    ("Lyon", ["Paris"], 0.0, 0.0, 0.0),
    ("Paris", ["Lyon", "Paris"], 0.0, 0.0, 0.0),  # only the FIRST gold counts
    ("The Eiffel Tower", ["eiffel tower!"], 1.0, 1.0, 1.0),  # HotpotQA normalisation
    ("yes it is", ["yes"], 0.0, 1.0, 0.0),  # yes/no rule in F1, sub-EM still containment
    ("no", ["not at all"], 0.0, 1.0, 0.0),  # containment is on characters ("no" in "not"); F1 yes/no rule
    ("New York City", ["New York"], 0.0, 1.0, 0.8),  # F1 = 2*(2/3)*1/(5/3)
    ("The.", ["Paris"], 0.0, 1.0, 0.0),  # normalises to "" -> inside every gold (the originals' quirk)
    ("Paris", ["the"], 0.0, 1.0, 0.0),  # a gold that normalises to "": inside every answer (MemAgent's get_pred)
    ("The", ["a"], 1.0, 1.0, 0.0),  # both "": equal (EM), contained (sub-EM), no common token (F1)
]


@pytest.mark.parametrize("pred, golds, em, sub, f1", PUBLISHED_CASES)
def test_score_published_table(pred, golds, em, sub, f1):
    s = score_published(f"reasoning... \\boxed{{{pred}}}", golds)
    assert (s.em, s.sub_em, s.f1) == (em, sub, f1)


def test_empty_or_missing_prediction_scores_zero():
    for response in ("no box at all", "\\boxed{}", "", None):
        s = score_published(response, ["Paris"])
        assert (s.em, s.sub_em, s.f1, s.answered) == (0.0, 0.0, 0.0, False)
    # a box of spaces is an answer to the originals (not stripped): it normalises to "" and so sits in every gold
    s = score_published("\\boxed{  }", ["Paris"])
    assert (s.em, s.sub_em, s.f1, s.answered) == (0.0, 1.0, 0.0, True)
    # memrl's one-way sub-EM would give an empty box 0 as well, but bidirectional without the guard gives 1
    assert score_protocol("\\boxed{}", ["Paris"], "memagent")["sub_em"] == 0.0


@pytest.mark.parametrize("response, gold, em, sub", [
    ("\\boxed Paris", "Paris", 1.0, 1.0),  # the "\\boxed " form: what follows it, up to a "$"
    ("\\boxed Paris$ and more", "Paris", 1.0, 1.0),
    ("\\boxed {Paris} x", "Paris", 0.0, 1.0),  # reads "{Paris} x" (the braces are punctuation to EM)
    ("Use \\boxed format. \\boxed{Paris}", "Paris", 0.0, 1.0),  # reads "format. \\boxed{Paris}"
    ("Use \\boxed format. \\boxed{Paris}", "Paris, France", 0.0, 0.0),
    ("\\boxed{Lyon} then \\boxed{Paris}", "Paris", 1.0, 1.0),  # the last box
    ("\\boxed{\\text{Paris}}", "Paris", 0.0, 1.0),  # nested braces kept: "\\text{Paris}"
    ("\\boxed\n{Paris}", "Paris", 1.0, 1.0),  # the originals stop on this one; memrl reads the box
])
def test_boxes_are_read_as_the_originals_read_them(response, gold, em, sub):
    s = score_published(response, [gold])
    assert (s.em, s.sub_em) == (em, sub), s.answer


def test_score_published_reads_after_think_and_answer_is():
    text = "<think>the answer is Lyon</think>Therefore, the answer is Paris."
    assert score_published(text, ["Paris"], "answer_is").sub_em == 1.0
    assert score_published(text, ["Lyon"], "answer_is").sub_em == 0.0


def test_protocols_differ_as_documented():
    resp = "\\boxed{Paris}"
    golds = ["Paris, France", "Paris"]
    assert score_protocol(resp, golds, "memrl") == {"em": 1.0, "sub_em": 1.0, "f1": 1.0, "answered": 1.0}
    # first gold only, bidirectional
    assert score_protocol(resp, golds, "memagent") == {"em": 0.0, "sub_em": 1.0, "f1": 0.67, "answered": 1.0}
    assert score_protocol(resp, ["Paris, France"], "memrl")["sub_em"] == 0.0  # one-way: gold not in prediction
    assert score_protocol(resp, golds, "rememr1") == score_protocol(resp, golds, "memagent")
    with pytest.raises(ValueError):
        score_protocol(resp, golds, "ruler")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("New York", "NewYork"),  # no lowercasing here: the reward lowercases first
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("50\\%", "50"),
        ("a .5", "a0.5"),
        ("90^\\circ", "90"),
        ("line\nbreak", "linebreak"),
    ],
)
def test_math_normalize(text, expected):
    assert math_normalize(text) == expected


@pytest.mark.parametrize(
    "response, golds, expected",
    [
        ("so \\boxed{New York}", ["new york"], 1.0),
        ("so \\boxed{NEW  YORK}", ["New York"], 1.0),  # lowercased, spaces removed
        ("so \\boxed{New York City}", ["New York"], 0.0),  # strict: no containment
        ("so \\boxed{Lyon}", ["Paris", "lyon"], 1.0),  # max over golds
        ("\\boxed{Paris}" + "x" * 300, ["Paris"], 0.0),  # box outside the last 300 characters
        ("\\boxed{Lyon} then \\boxed{Paris}", ["Lyon"], 0.0),  # last box only
        ("the answer is Paris", ["Paris"], 0.0),  # no box
        ("", ["Paris"], 0.0),
        ("\\boxed Paris", ["Paris"], 1.0),  # MemAgent's hotpotqa.py reads the "\\boxed " form
        ("\\boxed {Paris}", ["Paris"], 0.0),  # ... as "{paris}"
        ("\\boxed{Paris} in \\boxed format", ["Paris"], 0.0),  # ... as "format"
        ("\\boxed\n{Paris}", ["Paris"], 0.0),  # its assertion fails and is caught: 0
    ],
)
def test_memagent_strict_reward(response, golds, expected):
    assert memagent_strict_reward(response, golds) == expected
