"""Kafka's `ssl.principal.mapping.rules`: the principal name of a TLS client certificate,
from its distinguished name.

The rules are a comma-separated list, each `DEFAULT` (the distinguished name as it is) or
`RULE:pattern/replacement/` with an optional `L` or `U` after it (the result in lower or
upper case); a `/` inside a pattern or replacement is written `\\/`. The first rule whose
pattern matches the whole name gives the principal: the name with every match of the
pattern replaced, `$1` ... `$9` in the replacement standing for the pattern's groups (a
reference to a group the pattern lacks is kept as text, as Kafka keeps it). A name no rule
matches has no principal: the connection is refused.

Java's and Python's regular expressions agree on what these rules use (groups, classes,
quantifiers, anchors); a pattern Python cannot compile is an invalid rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_RULES: Final = "DEFAULT"
"""Kafka's default `ssl.principal.mapping.rules`."""

_RULE: Final = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER: Final = re.compile(_RULE)
_BACK_REFERENCE: Final = re.compile(r"\$(\d+)")


class InvalidRuleError(ValueError):
    """A rule of `ssl.principal.mapping.rules` that does not parse."""


class NoMatchingRuleError(LookupError):
    """No rule gives the distinguished name a principal."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None
    replacement: str
    case: str

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda match: _replace(self.replacement, match, groups), name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _replace(replacement: str, match: re.Match[str], groups: int) -> str:
    """Java's replacement syntax as Kafka's rules use it: `\\x` is the character x; `$`
    and digits a group, the first digit and then each next one that still names a group of
    the pattern (`$12` with five groups is group 1 and a "2"), except that a reference to a
    group the pattern lacks, however its digits are cut, stays text (`$4` with three groups)."""
    out: list[str] = []
    i = 0
    end = len(replacement)
    while i < end:
        char = replacement[i]
        if char == "\\" and i + 1 < end:
            out.append(replacement[i + 1])
            i += 2
            continue
        reference = _BACK_REFERENCE.match(replacement, i) if char == "$" else None
        if reference is not None and not _kept_as_text(reference.group(1), groups):
            digits = reference.group(1)
            number = int(digits[0])
            used = 1
            while used < len(digits) and number * 10 + int(digits[used]) <= groups:
                number = number * 10 + int(digits[used])
                used += 1
            out.append(match.group(number) or "")
            i += 1 + used
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _kept_as_text(digits: str, groups: int) -> bool:
    """Whether Kafka escapes the reference `$digits` into text (its
    `escapeLiteralBackReferences`): a number not starting with 0 that names no group even
    cut to its first digits."""
    if digits.startswith("0"):
        return False
    index = int(digits)
    while index > groups and index >= 10:
        index //= 10
    return index > groups


class SslPrincipalMapper:
    """The rules of `ssl.principal.mapping.rules`, parsed once; `principal_name` maps."""

    def __init__(self, rules: str | None = None) -> None:
        text = DEFAULT_RULES if rules is None else rules
        self.rules_text = text
        parsed = [_parse(rule) for rule in _split(text)]
        self._rules = [rule for rule in parsed if rule is not None]

    def principal_name(self, distinguished_name: str) -> str:
        """The principal name of `distinguished_name`; NoMatchingRuleError when no rule
        applies."""
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRuleError(
            f"no rule of {self.rules_text!r} applies to {distinguished_name!r}"
        )


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _SPLITTER.finditer(rules.strip()) if match.group(1)]


def _parse(rule: str) -> _Rule | None:
    match = _PARSER.match(rule)
    if match is None or match.end() != len(rule):
        raise InvalidRuleError(f"invalid rule {rule!r}")
    if match.group(1) is not None:
        return _Rule(None, "", "")
    if match.group(2) is None:
        if match.group(7):
            raise InvalidRuleError(f"invalid rule {rule!r}")
        return None
    try:
        pattern = re.compile(match.group(2))
    except re.error as error:
        raise InvalidRuleError(f"invalid rule {rule!r}: {error}") from None
    replacement = match.group(4)
    if pattern.groups == 0 and _BACK_REFERENCE.search(replacement):
        # Kafka takes such a rule and fails each name it matches; refused here at once.
        raise InvalidRuleError(f"invalid rule {rule!r}: the pattern has no group to refer to")
    return _Rule(pattern, replacement, match.group(6))
