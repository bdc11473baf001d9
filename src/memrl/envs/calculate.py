"""τ²-bench's ``calculate`` tool, without the expressions that never return.

τ²-bench checks that an expression holds only digits, ``+ - * /``, parentheses, dots and spaces, then hands it
to Python's ``eval``. Those characters still spell ``**``: ``9**9**9**9`` asks for an integer of billions of
digits, and Python computes it holding the interpreter lock, deaf to Ctrl-C. A policy that samples such a
call (random tokens early in RL do) would freeze the whole training process, engine thread included.

So the expression is parsed as Python parses it and evaluated node by node with Python's own operators (the
same results and the same error messages), except that an integer power or product whose result would pass
:data:`MAX_BITS` bits is refused with the error τ²-bench's tool ends with for any integer beyond float range
(``OverflowError: int too large to convert to float``), before it is computed. Floats need no guard: their
power overflows at once. Anything but numbers, ``+ - * / // **`` and signs (``...``, say) goes to ``eval``
as in τ²-bench: it fails at once.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

ALLOWED = frozenset("0123456789+-*/(). ")
MAX_BITS = 1 << 16  # far past float range (1,024 bits); such an integer takes well under a millisecond
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_TOO_BIG = "int too large to convert to float"


def calculate_expression(expression: str) -> str:
    """τ²-bench's ``calculate``: the expression's value rounded to 2 decimals; Python's errors as they are."""
    if any(ch not in ALLOWED for ch in expression):
        raise ValueError("Invalid characters in expression")
    # eval's parser, after eval's own stripping of leading spaces: the same SyntaxError for the same text
    tree = ast.parse(expression.lstrip(" "), filename="<string>", mode="eval")
    if all(isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop))
           for n in ast.walk(tree)):
        value = _value(tree.body)
    else:
        value = eval(expression, {"__builtins__": None}, {})  # noqa: S307 - only the characters above
    return str(round(float(value), 2))


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_value(node.operand))
    assert isinstance(node, ast.BinOp)
    left, right = _value(node.left), _value(node.right)
    if isinstance(node.op, (ast.Pow, ast.Mult)) and _too_big(node.op, left, right):
        raise OverflowError(_TOO_BIG)
    return _BINARY[type(node.op)](left, right)


def _too_big(op: ast.operator, left: Any, right: Any) -> bool:
    """Whether an integer ``left op right`` has more than :data:`MAX_BITS` bits (a lower bound on its size)."""
    if not (_is_int(left) and _is_int(right)):
        return False
    if isinstance(op, ast.Mult):
        return left != 0 and right != 0 and abs(left).bit_length() + abs(right).bit_length() - 1 > MAX_BITS
    if right <= 0 or abs(left) < 2:
        return False  # a negative power is a float; 0, 1 and -1 stay small
    return (abs(left).bit_length() - 1) * right > MAX_BITS


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
