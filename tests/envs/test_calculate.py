"""τ²-bench's ``calculate``: the same values and errors as its ``eval``, and no expression that never returns."""

from __future__ import annotations

import random

import pytest

from memrl.envs.calculate import MAX_BITS, calculate_expression


def tau2_calculate(expression: str) -> str:
    """τ²-bench's tool body (retail/airline ``calculate``), as the reference."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise ValueError("Invalid characters in expression")
    return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))


def outcome(fn, expression: str):
    try:
        return fn(expression)
    except Exception as exc:  # the tool's error is the observation: compare type and text
        return type(exc).__name__, str(exc)


def grammar_expression(rng: random.Random, depth: int = 0) -> str:
    """A random well-formed expression whose powers stay small (so the reference returns)."""
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(["0", "1", "2", "7", "10", "0.5", "3.25", ".5", "5.", "1000000", "123456789"])
    kind = rng.random()
    if kind < 0.15:
        return rng.choice(["-", "+", "- "]) + grammar_expression(rng, depth + 1)
    if kind < 0.25:
        return f"({grammar_expression(rng, depth + 1)})"
    if kind < 0.35:
        return f"{rng.choice(['2', '3', '-2', '0.5', '10', '(1+1)'])} ** {rng.choice(['0', '2', '3', '-1', '0.5', '(1+2)'])}"
    op = rng.choice(["+", "-", "*", "/", "//", " * ", " / "])
    return f"{grammar_expression(rng, depth + 1)}{op}{grammar_expression(rng, depth + 1)}"


def character_soup(rng: random.Random) -> str:
    """Random strings of the allowed characters, most of them not Python at all (no '**': it could not return)."""
    while True:
        text = "".join(rng.choice("0123456789+-*/(). ") for _ in range(rng.randint(0, 10)))
        if "**" not in text:
            return text


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # eval's own, for texts such as "2(3)"
def test_same_values_and_errors_as_tau2_bench():
    rng = random.Random(0)
    corpus = [grammar_expression(rng) for _ in range(3000)] + [character_soup(rng) for _ in range(3000)]
    corpus += ["", " ", "...", "(*1)", "1/0", "1.0/0", "1//0", "2**1023", "2**1024", "(-8)**0.5", "0**-1",
               "2**-1074", "2**-1080", "10**400/10**399", "-2**2", "(2+3)*1.111", "9.0**9**9", "1e5", "a"]
    kinds = {type(outcome(tau2_calculate, e)).__name__ for e in corpus}
    assert kinds == {"str", "tuple"}  # both values and errors are compared
    diffs = [(e, outcome(calculate_expression, e), outcome(tau2_calculate, e)) for e in corpus
             if outcome(calculate_expression, e) != outcome(tau2_calculate, e)]
    assert not diffs, diffs[:5]


@pytest.mark.parametrize("expression", ["9**9**9**9", "10**10**10", "9 ** 99999", "(2**40000)*(2**40000)",
                                        "-(7**100000)", "((2**60000))//3"])
def test_an_integer_too_big_for_any_float_is_refused_before_it_is_computed(expression):
    """τ²-bench would compute these for minutes (or forever, holding the GIL) before float() refused them."""
    with pytest.raises(OverflowError, match="int too large to convert to float"):
        calculate_expression(expression)


def test_the_bound_is_far_past_float_range():
    assert MAX_BITS > 1024 * 16
    assert calculate_expression(f"2**{MAX_BITS} // 2**{MAX_BITS - 3}") == "8.0"  # big intermediates still work
    assert calculate_expression("3**600 / 3**598") == tau2_calculate("3**600 / 3**598") == "9.0"
