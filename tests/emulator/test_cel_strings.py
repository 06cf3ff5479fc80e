"""The emulator's CEL evaluator: the strings extension's `replace` and `split`, and string
literals that look like operators.

Real: e2e/emulator/cel.py's `evaluate`, as the emulator runs a CRD's rules. Faked: nothing.
"""

from __future__ import annotations

from e2e.emulator.cel import evaluate


def test_replace_and_split_behave_as_cels_strings_extension() -> None:
    assert evaluate("self.replace('_', '-') == '--api-key'", "--api_key") is True
    assert evaluate("self.replace('_', '-', 1) == 'a-b_c'", "a_b_c") is True
    assert evaluate("self.split('=')[0] == '--port'", "--port=80=x") is True
    assert evaluate("self.split('=', 2) == ['a', 'b=c']", "a=b=c") is True
    assert evaluate("size(self.split('=', 0)) == 0", "a=b") is True


def test_a_string_literal_is_never_read_as_an_operator() -> None:
    # '-' as the argument of a method once parsed as a unary minus, and the rule was skipped.
    assert evaluate("self.replace('-', '+') == '+x'", "-x") is True
    assert evaluate("self.all(a, !(a in ['-m', '?']))", ["-m"]) is False
