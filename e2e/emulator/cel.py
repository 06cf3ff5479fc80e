"""A small evaluator for the simplest CRD `x-kubernetes-validations` (CEL) rules.

Enough CEL for the rules CRDs commonly carry: comparisons, `&&`/`||`/`!`,
arithmetic, `has()`, `size()`, string methods (the strings extension's `replace` and
`split` included), `in`, `all`/`exists` macros and
transition rules on `oldSelf`. A rule that uses anything else (or fails to
parse) is skipped, never failed — the README lists that divergence.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d+|\d+)|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)


Node = Callable[[dict[str, Any]], Any]  # a compiled expression: environment -> value


class Unsupported(Exception):
    """The rule uses CEL the emulator does not evaluate."""


class _Missing:
    """Result of selecting an absent field (only `has()` may look at it)."""


MISSING = _Missing()
_LITERAL = object()  # what `peek` sees of a string or number token


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Unsupported(text[pos:])
        pos = m.end()
        kind = m.lastgroup or ""
        value: Any = m.group(kind)
        if kind == "num":
            value = float(value) if "." in value else int(value)
        elif kind == "str":
            value = bytes(value[1:-1], "utf-8").decode("unicode_escape")
        out.append((kind, value))
    return out


class _Parser:
    """Recursive descent over CEL's precedence levels, evaluating as it goes lazily."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> Any:
        """The next operator or name; a literal is never one (the string '-' is no minus)."""
        if self.i >= len(self.toks):
            return None
        kind, value = self.toks[self.i]
        return value if kind in ("op", "id") else _LITERAL

    def take(self, expected: Any = None) -> Any:
        if self.i >= len(self.toks) or (expected is not None and self.peek() != expected):
            raise Unsupported(f"expected {expected!r}")
        self.i += 1
        return self.toks[self.i - 1][1]

    def parse(self) -> Node:
        node = self.ternary()
        if self.i != len(self.toks):
            raise Unsupported("trailing tokens")
        return node

    def ternary(self) -> Node:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take("?")
        yes = self.ternary()
        self.take(":")
        no = self.ternary()
        return lambda env: yes(env) if _truth(cond(env)) else no(env)

    LEVELS = (
        ("||",),
        ("&&",),
        ("==", "!=", "<", "<=", ">", ">=", "in"),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> Node:
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self.LEVELS[level]:
            op = self.take()
            right = self.binary(level + 1)
            left = _binop(op, left, right)
        return left

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            op = self.take()
            inner = self.unary()
            return (lambda env: not _truth(inner(env))) if op == "!" else (lambda env: -inner(env))
        return self.postfix(self.primary())

    def primary(self) -> Node:
        kind, value = self.toks[self.i] if self.i < len(self.toks) else ("", None)
        self.i += 1
        if kind in ("num", "str"):
            return lambda env: value
        if value == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if value == "[":
            items = self.args("]")
            return lambda env: [f(env) for f in items]
        if kind != "id" or not isinstance(value, str):
            raise Unsupported(str(value))
        consts = {"true": True, "false": False, "null": None}
        if value in consts:
            return lambda env: consts[value]
        if self.peek() == "(":
            self.take("(")
            return self._function(value, self.args(")"))
        name: str = value
        return lambda env: env[name] if name in env else _raise(name)

    def args(self, close: str) -> list[Node]:
        items = []
        while self.peek() != close:
            items.append(self.ternary())
            if self.peek() == ",":
                self.take(",")
        self.take(close)
        return items

    def postfix(self, node: Node) -> Node:
        while self.peek() in (".", "["):
            if self.take() == "[":
                key = self.ternary()
                self.take("]")
                node = _index(node, key)
                continue
            name = self.take()
            if self.peek() == "(":
                self.take("(")
                node = self._method(node, name)
            else:
                node = _select(node, name)
        return node

    def _function(self, name: str, args: list[Node]) -> Node:
        if name == "has" and len(args) == 1:
            return lambda env: args[0](env) is not MISSING
        if name == "size" and len(args) == 1:
            return lambda env: len(args[0](env))
        if name in ("int", "string", "double") and len(args) == 1:
            conv = {"int": int, "string": str, "double": float}[name]
            return lambda env: conv(args[0](env))
        raise Unsupported(name)

    def _method(self, target: Node, name: str) -> Node:
        if name in ("all", "exists", "exists_one"):
            var = self.take()
            self.take(",")
            pred = self.ternary()
            self.take(")")
            agg = {"all": all, "exists": any}.get(name)

            def macro(env: dict[str, Any]) -> Any:
                coll = target(env)
                items = list(coll.keys()) if isinstance(coll, dict) else list(coll)
                hits = [_truth(pred({**env, var: x})) for x in items]
                return agg(hits) if agg else sum(hits) == 1

            return macro
        args = self.args(")")
        methods: dict[str, Callable[..., Any]] = {
            "size": len,
            "startsWith": str.startswith,
            "endsWith": str.endswith,
            "contains": lambda s, x: x in s,
            "matches": lambda s, p: re.search(p, s) is not None,
            "lowerAscii": str.lower,
            "upperAscii": str.upper,
            "replace": _replace,
            "split": _split,
        }
        if name not in methods:
            raise Unsupported(name)
        fn = methods[name]
        return lambda env: fn(target(env), *[a(env) for a in args])


def _replace(text: str, old: str, new: str, limit: int = -1) -> str:
    """CEL's strings extension `replace(old, new[, n])` (n < 0: every occurrence)."""
    return text.replace(old, new, limit)


def _split(text: str, sep: str, limit: int = -1) -> list[str]:
    """CEL's strings extension `split(sep[, n])`: at most n parts (n < 0: all, 0: none)."""
    if limit == 0:
        return []
    return text.split(sep, limit - 1 if limit > 0 else -1)


def _raise(name: str) -> Any:
    raise Unsupported(f"unknown identifier {name}")


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Unsupported("non-boolean condition")
    return value


def _select(node: Node, name: str) -> Node:
    def select(env: dict[str, Any]) -> Any:
        value = node(env)
        if value is MISSING or not isinstance(value, dict):
            raise Unsupported(f"no such key: {name}")  # CEL runtime error: skip the rule
        return value.get(name, MISSING)

    return select


def _index(node: Node, key: Node) -> Node:
    return lambda env: node(env)[key(env)]


def _binop(op: str, left: Node, right: Node) -> Node:
    if op == "&&":
        return lambda env: _truth(left(env)) and _truth(right(env))
    if op == "||":
        return lambda env: _truth(left(env)) or _truth(right(env))
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "in": lambda a, b: a in b,
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "*": lambda a, b: a * b,
        "%": lambda a, b: a % b,
        "/": lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
    }
    fn = ops[op]

    def apply(env: dict[str, Any]) -> Any:
        a, b = left(env), right(env)
        if a is MISSING or b is MISSING:
            raise Unsupported("no such key")
        return fn(a, b)

    return apply


def evaluate(rule: str, value: Any, old: Any = MISSING) -> bool | None:
    """True/False for a rule on `self` (and `oldSelf`); None when the emulator cannot tell."""
    env = {"self": value}
    if old is not MISSING:
        env["oldSelf"] = old
    elif "oldSelf" in rule:
        return None  # transition rules only run on update
    node = _compile(rule)
    if node is None:
        return None
    try:
        return _truth(node(env))
    except _SKIPPED:
        return None


_SKIPPED = (Unsupported, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError, re.error)


@functools.lru_cache(maxsize=4096)
def _compile(rule: str) -> Node | None:
    """A rule parsed once (parsing costs more than evaluating); None if not evaluable.

    The compiled closures hold no state of their own, so one can serve every object
    and thread; only the environment passed in differs.
    """
    try:
        return _Parser(rule).parse()
    except _SKIPPED:
        return None
