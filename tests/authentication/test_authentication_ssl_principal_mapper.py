"""Kafka's ssl.principal.mapping.rules, on the facts of Kafka's SslPrincipalMapperTest."""

from __future__ import annotations

import pytest

from coordinator_server.authentication.ssl_principal_mapper import (
    InvalidRuleError,
    NoMatchingRuleError,
    SslPrincipalMapper,
)

KAFKAS_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, "
    "DEFAULT"
)


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        "  DEFAULT  , DEFAULT   ",
        KAFKAS_RULES,
    ],
)
def test_kafkas_valid_rules_parse(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT/L",
        "DEFAUL",
        "DEFAULT/U",
        "RULE:/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        # Beyond Kafka's list: a pattern Python cannot compile, and a reference to a group
        # of a pattern that has none (Kafka fails each name such a rule matches).
        "RULE:^CN=(.*$/$1/",
        "RULE:^CN=.*$/$1/",
    ],
)
def test_kafkas_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(InvalidRuleError):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    ("name", "principal"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_the_first_rule_that_matches_names_the_principal(name: str, principal: str) -> None:
    assert SslPrincipalMapper(KAFKAS_RULES).principal_name(name) == principal


def test_without_rules_the_name_is_the_principal() -> None:
    assert SslPrincipalMapper().principal_name("CN=a,O=b") == "CN=a,O=b"


def test_a_name_no_rule_matches_has_no_principal() -> None:
    with pytest.raises(NoMatchingRuleError):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").principal_name("CN=a,OU=x")


def test_an_escaped_comma_and_spaces_stay_in_the_name() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.principal_name(r"CN=Kafka\, Server,OU=ServiceUsers") == r"Kafka\, Server"


def test_an_escaped_slash_is_part_of_the_pattern_and_the_replacement() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=([^\/]*)\/(.*)$/$1\/$2/")
    assert mapper.principal_name("CN=a/b") == "a/b"


@pytest.mark.parametrize(
    ("replacement", "principal"),
    [
        # A reference to a group the pattern lacks stays text.
        ("$1@$4", "a@$4"),
        # Digits that name no group are text after the group they start.
        ("$12", "a2"),
        ("$0", "CN=a,OU=b,O=c"),
        (r"\$1", "$1"),
    ],
)
def test_references_in_the_replacement_follow_java(replacement: str, principal: str) -> None:
    mapper = SslPrincipalMapper(f"RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/{replacement}/")
    assert mapper.principal_name("CN=a,OU=b,O=c") == principal
