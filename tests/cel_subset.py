"""A tiny evaluator for the CEL that gpuplan's DRA selectors and NVIDIA's DeviceClasses use.

No CEL library is installed here, and Kubernetes evaluates a DeviceClass's and a request's
selectors over a device's attributes with full CEL (cel-go). The selectors gpuplan emits,
and the DeviceClasses NVIDIA's DRA driver installs, use only this subset:

    expr    := term ("&&" term)*
    term    := operand "==" literal | operand "in" "[" literal ("," literal)* "]"
    operand := "device" "." "driver"
             | "device" "." "attributes" "[" literal "]" "." identifier
    literal := a single- or double-quoted string, with backslash escapes

Anything else is a parse error, so an expression that strays out of the subset fails the
tests instead of being judged by a wrong rule. As in CEL, ``&&`` is commutative over
errors: a term that reads a missing attribute is an error unless another term is false,
in which case the whole is false (cel-go's rule; Kubernetes reports a remaining error
as a failed allocation).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(?P<op>&&|==|[.\[\],])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"""
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


class CelError(Exception):
    """An expression outside the subset, or one that reads a missing attribute."""


@dataclass(frozen=True)
class Device:
    """What a selector sees of a device: its driver and its attributes by domain."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]


def _unquote(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1]
            if nxt == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
                continue
            if nxt not in _ESCAPES:
                raise CelError(f"escape \\{nxt} is outside the subset")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _tokens(expression: str) -> list[tuple[str, str]]:
    found, pos = [], 0
    expression = expression.strip()
    while pos < len(expression):
        match = _TOKEN.match(expression, pos)
        if match is None or match.end() == pos:
            raise CelError(f"cannot read {expression[pos:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match[kind]))
        pos = match.end()
    return found


class _Parser:
    def __init__(self, expression: str) -> None:
        self.tokens = _tokens(expression)
        self.at = 0

    def take(self, kind: str, text: str | None = None) -> str:
        if self.at >= len(self.tokens):
            raise CelError(f"expected {text or kind}, found the end")
        got_kind, got = self.tokens[self.at]
        if got_kind != kind or (text is not None and got != text):
            raise CelError(f"expected {text or kind}, found {got!r}")
        self.at += 1
        return got

    def peek(self, text: str) -> bool:
        return self.at < len(self.tokens) and self.tokens[self.at][1] == text

    def operand(self) -> tuple[str, ...]:
        self.take("id", "device")
        self.take("op", ".")
        field = self.take("id")
        if field == "driver":
            return ("driver",)
        if field != "attributes":
            raise CelError(f"device.{field} is outside the subset")
        self.take("op", "[")
        domain = _unquote(self.take("str"))
        self.take("op", "]")
        self.take("op", ".")
        return ("attribute", domain, self.take("id"))

    def term(self) -> tuple[tuple[str, ...], frozenset[str]]:
        operand = self.operand()
        if self.peek("=="):
            self.take("op", "==")
            return operand, frozenset([_unquote(self.take("str"))])
        self.take("id", "in")
        self.take("op", "[")
        values = [_unquote(self.take("str"))]
        while self.peek(","):
            self.take("op", ",")
            values.append(_unquote(self.take("str")))
        self.take("op", "]")
        return operand, frozenset(values)

    def expression(self) -> list[tuple[tuple[str, ...], frozenset[str]]]:
        terms = [self.term()]
        while self.peek("&&"):
            self.take("op", "&&")
            terms.append(self.term())
        if self.at != len(self.tokens):
            raise CelError(f"unexpected {self.tokens[self.at][1]!r}")
        return terms


def attributes_read(expression: str) -> set[tuple[str, str]]:
    """The ``(domain, name)`` of every attribute the expression reads."""
    return {(op[1], op[2]) for op, _ in _Parser(expression).expression() if op[0] == "attribute"}


def evaluate(expression: str, device: Device) -> bool:
    """Whether ``expression`` admits ``device``; raises :class:`CelError` for an error."""
    error: CelError | None = None
    for operand, values in _Parser(expression).expression():
        if operand[0] == "driver":
            value: Any = device.driver
        else:
            domain, name = operand[1], operand[2]
            if name not in device.attributes.get(domain, {}):
                error = CelError(f"no such key: {name}")
                continue
            value = device.attributes[domain][name]
        if value not in values:
            return False
    if error is not None:
        raise error
    return True
