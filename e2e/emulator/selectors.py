"""Label and field selectors, parsed with the real grammar.

Controllers find their children by label selector and kubectl passes `-l` through
verbatim, so the parser accepts exactly what apimachinery's `labels.Parse` does
(`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and rejects the rest with 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[^\s!=(),]+)")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!", "=", "!="
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and value in self.values
        return not has or value not in self.values  # "!=" and "notin"


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            break
        out.append(m.group(1))
        pos = m.end()
        if not text[pos:].strip():
            break
    return out


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a label selector; raises ApiError(400) like the real server."""
    if not text or not text.strip():
        return []
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0
    try:
        while i < len(toks):
            req, i = _parse_one(toks, i)
            reqs.append(req)
            if i < len(toks):
                if toks[i] != ",":
                    raise ValueError(f"found '{toks[i]}', expected: ',' or 'end of string'")
                i += 1
    except (ValueError, IndexError) as exc:
        raise bad_request(f"unable to parse requirement: {exc}") from None
    return reqs


def _parse_one(toks: list[str], i: int) -> tuple[Requirement, int]:
    if toks[i] == "!":
        return Requirement(_key(toks[i + 1]), "!"), i + 2
    key = _key(toks[i])
    i += 1
    if i >= len(toks) or toks[i] == ",":
        return Requirement(key, "exists"), i
    op = toks[i]
    if op in ("=", "==", "!="):
        value = toks[i + 1] if i + 1 < len(toks) and toks[i + 1] != "," else ""
        _check_value(value)
        step = 2 if value else 1
        return Requirement(key, "!=" if op == "!=" else "=", (value,)), i + step
    if op in ("in", "notin"):
        if toks[i + 1] != "(":
            raise ValueError(f"found '{toks[i + 1]}', expected: '('")
        values: list[str] = []
        j = i + 2
        while toks[j] != ")":
            if toks[j] != ",":
                _check_value(toks[j])
                values.append(toks[j])
            j += 1
        return Requirement(key, op, tuple(values)), j + 1
    raise ValueError(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")


_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _key(tok: str) -> str:
    if not _KEY.match(tok) or len(tok.rpartition("/")[2]) > 63:
        raise ValueError(f"invalid label key {tok!r}")
    return tok


def _check_value(tok: str) -> None:
    if not _VALUE.match(tok) or len(tok) > 63:
        raise ValueError(f"invalid label value: {tok!r}")


def match_labels(reqs: list[Requirement], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in reqs)


def parse_field_selector(
    text: str | None, *, allowed: tuple[str, ...]
) -> Callable[[dict[str, Any]], bool]:
    """Field selectors: only `=`, `==`, `!=` on the fields the real server supports."""
    if not text or not text.strip():
        return lambda _obj: True
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.groups()
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        terms.append((path, op != "!=", value))

    def check(obj: dict[str, Any]) -> bool:
        return all((_field(obj, p) == v) is eq for p, eq, v in terms)

    return check


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)
