"""`ClientSecurity` from Kafka's client properties: the .properties file format (comments,
separators, continuations, escapes), Kafka's JAAS line, librdkafka's alternatives, PEM trust
and key stores, what is refused (with the property's name) and what is ignored (with a
warning), and secrets kept out of every repr and message."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from coordinator_client import ClientSecurity, ClientSecurityError, read_properties_file
from coordinator_client.rpc.sasl import OAuthBearerSaslClient, PlainSaslClient, ScramSaslClient
from coordinator_client.rpc.security import Password, parse_jaas_config, parse_properties
from coordinator_protocol.errors import SaslAuthenticationFailedError

PASSWORD = "s3cr3t-Pa55"
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{PASSWORD}";'
)


# The .properties file


def test_a_properties_file_reads_as_javas_properties_load(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "   indented.key    spaced value\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="p\\\\w";\n'
        "escaped\\=key=a\\tb\\u0041\n"
        "empty=\n"
        "trailing.backslashes=ends with two \\\\\n"
        "repeated=first\n"
        "repeated=last\r\n"
        "windows.line=yes\r\n",
        encoding="utf-8",
    )
    assert read_properties_file(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "indented.key": "spaced value",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\w";',
        "escaped=key": "a\tbA",
        "empty": "",
        "trailing.backslashes": "ends with two \\",
        "repeated": "last",
        "windows.line": "yes",
    }


def test_a_comment_is_not_continued_and_a_continuation_at_the_end_is_dropped() -> None:
    assert parse_properties("# comment \\\nkey=value\nlast=one \\") == {
        "key": "value",
        "last": "one ",
    }


def test_a_continued_line_keeps_what_looks_like_a_comment() -> None:
    assert parse_properties("key=a\\\n  #b") == {"key": "a#b"}


def test_a_bad_unicode_escape_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClientSecurityError, match="uXXXX"):
        parse_properties("key=\\u12")
    with pytest.raises(ClientSecurityError, match="cannot read"):
        read_properties_file(tmp_path / "missing.properties")


# Kafka's JAAS line


def test_the_jaas_line_gives_the_module_and_its_options() -> None:
    module, options = parse_jaas_config(
        "  org.apache.kafka.common.security.plain.PlainLoginModule   Required\n"
        '  username="al\\"ice" password=bare-value /* a comment */ extra="a;b=c"; '
    )
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": 'al"ice', "password": "bare-value", "extra": "a;b=c"}


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ('org.example.Module required username="a"', "does not end with ';'"),
        ('org.example.Module username="a";', "control flag"),
        ("org.example.Module always;", "control flag"),
        ('org.example.Module required username "a";', "name=value"),
        ('org.example.Module required username="a;', "not closed"),
        ("", "holds 0 login modules"),
        ("a.Module required; b.Module required;", "holds 2 login modules"),
    ],
)
def test_a_jaas_line_that_does_not_parse_is_refused_without_quoting_it(
    line: str, complaint: str
) -> None:
    with pytest.raises(ClientSecurityError, match=complaint) as caught:
        parse_jaas_config(line.replace('"a', f'"{PASSWORD}'))
    assert PASSWORD not in str(caught.value)


# Kafka's properties to settings


def test_scram_over_tls_from_kafkas_names() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "scram-sha-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert security.security_protocol == "SASL_SSL"
    assert security.sasl_mechanism == "SCRAM-SHA-512"
    assert security.sasl_username == "alice"
    assert security.sasl_password == Password(PASSWORD)
    assert security.ssl_ca_location == Path("/etc/ca.pem")
    assert security.ssl_endpoint_identification_algorithm == "none"
    assert security.uses_tls and security.uses_sasl
    assert isinstance(security.sasl_client(), ScramSaslClient)
    assert security.describe() == "SASL_SSL, SCRAM-SHA-512 as alice"


def test_librdkafkas_user_name_and_password_for_plain() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": PASSWORD,
        }
    )
    assert (security.sasl_username, security.sasl_password) == ("bob", Password(PASSWORD))
    assert isinstance(security.sasl_client(), PlainSaslClient)


def test_jaas_and_librdkafkas_credentials_together_are_refused() -> None:
    with pytest.raises(ClientSecurityError, match="not both"):
        ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": SCRAM_JAAS,
                "sasl.username": "alice",
            }
        )


def test_a_login_module_that_is_not_the_mechanisms_is_refused() -> None:
    with pytest.raises(
        ClientSecurityError, match=r"takes org\.apache\.kafka\.common\.security\.plain"
    ):
        ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": SCRAM_JAAS,
            }
        )


def test_sasl_without_a_mechanism_is_refused_as_kafkas_default_is_gssapi() -> None:
    with pytest.raises(ClientSecurityError, match="GSSAPI"):
        ClientSecurity.from_properties(
            {"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS}
        )


@pytest.mark.parametrize(
    ("properties", "complaint"),
    [
        ({"security.protocol": "TLS"}, "security.protocol 'TLS'"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "'GSSAPI' is not one"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a user name"),
        ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism.*PLAINTEXT"),
        ({"ssl.ca.location": "/ca.pem"}, "TLS files are given"),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/k.pem"},
            "without its certificate",
        ),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
            "not https or empty",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused(properties: dict[str, str], complaint: str) -> None:
    with pytest.raises(ClientSecurityError, match=complaint):
        ClientSecurity.from_properties(properties)


def test_unknown_security_properties_are_refused_with_their_names() -> None:
    with pytest.raises(ClientSecurityError) as caught:
        ClientSecurity.from_properties(
            {
                "security.protocol": "SSL",
                "ssl.truststore.password": PASSWORD,
                "sasl.kerberos.service.name": "kafka",
                "request.timeout.ms": "1000",
            }
        )
    message = str(caught.value)
    assert "ssl.truststore.password" in message
    assert "sasl.kerberos.service.name" in message
    assert "request.timeout.ms" not in message
    assert PASSWORD not in message


def test_other_properties_are_ignored_with_a_warning_naming_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="coordinator_client.rpc.security"):
        security = ClientSecurity.from_properties(
            {"request.timeout.ms": "1000", "client.id": "tool", "security.protocol": "SSL"}
        )
    assert security.security_protocol == "SSL"
    (record,) = caplog.records
    assert "client.id, request.timeout.ms" in record.getMessage()


def test_kafkas_pem_trust_and_key_stores() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/tls/ca.pem",
            "ssl.keystore.type": "pem",
            "ssl.keystore.location": "/tls/client-bundle.pem",
            "ssl.key.password": PASSWORD,
        }
    )
    assert security.ssl_ca_location == Path("/tls/ca.pem")
    assert security.ssl_certificate_location == Path("/tls/client-bundle.pem")
    assert security.ssl_key_location is None
    assert security.ssl_key_password == Password(PASSWORD)


@pytest.mark.parametrize(
    ("properties", "complaint"),
    [
        ({"ssl.truststore.location": "/ts.jks"}, "ssl.truststore.type JKS"),
        ({"ssl.keystore.location": "/ks.p12", "ssl.keystore.type": "PKCS12"}, "PKCS12"),
        (
            {
                "ssl.truststore.location": "/ca.pem",
                "ssl.truststore.type": "PEM",
                "ssl.ca.location": "/ca.pem",
            },
            "not both",
        ),
    ],
)
def test_java_key_stores_and_two_names_for_one_file_are_refused(
    properties: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ClientSecurityError, match=complaint):
        ClientSecurity.from_properties({"security.protocol": "SSL", **properties})


# OAUTHBEARER's token


def oauthbearer(**extra: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", **extra}


def test_the_token_file_is_read_at_each_authentication(tmp_path: Path) -> None:
    token = tmp_path / "token.jwt"
    token.write_text("first.token.value\n")
    security = ClientSecurity.from_properties(
        oauthbearer(**{"sasl.oauthbearer.token.file": str(token)})
    )
    first = security.sasl_client()
    assert isinstance(first, OAuthBearerSaslClient)
    assert first.initial_response() == b"n,,\x01auth=Bearer first.token.value\x01\x01"
    token.write_text("second.token.value")
    assert security.sasl_client().initial_response().endswith(b"second.token.value\x01\x01")
    token.unlink()
    with pytest.raises(SaslAuthenticationFailedError, match="token file"):
        security.sasl_client()


def test_kafkas_file_token_endpoint_and_the_jaas_option_name_the_token_file(
    tmp_path: Path,
) -> None:
    token = tmp_path / "my token.jwt"
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    from_url = ClientSecurity.from_properties(
        oauthbearer(
            **{
                "sasl.oauthbearer.token.endpoint.url": token.as_uri(),
                "sasl.login.callback.handler.class": handler,
                "sasl.jaas.config": f"{module} required;",
            }
        )
    )
    from_jaas = ClientSecurity.from_properties(
        oauthbearer(**{"sasl.jaas.config": f'{module} required tokenFile="{token}";'})
    )
    assert from_url.sasl_oauthbearer_token_file == token
    assert from_jaas.sasl_oauthbearer_token_file == token


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({}, "needs its token's file"),
        ({"sasl.oauthbearer.token.endpoint.url": "https://idp/token"}, "only a file: URL"),
        (
            {
                "sasl.oauthbearer.token.file": "/a",
                "sasl.oauthbearer.token.endpoint.url": "file:///b",
            },
            "given twice",
        ),
        (
            {
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";'
            },
            "unsecured",
        ),
        ({"sasl.login.callback.handler.class": "com.example.Handler"}, "com.example.Handler"),
    ],
)
def test_oauthbearer_settings_that_cannot_work_are_refused(
    extra: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ClientSecurityError, match=complaint):
        ClientSecurity.from_properties(oauthbearer(**extra))


# Secrets


def test_secrets_never_show_in_a_repr_a_str_or_a_describe() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": PASSWORD,
            "ssl.certificate.location": "/c.pem",
            "ssl.key.location": "/k.pem",
            "ssl.key.password": PASSWORD,
        }
    )
    for text in (repr(security), str(security), security.describe(), repr(security.sasl_client())):
        assert PASSWORD not in text
    assert security.sasl_password is not None and security.sasl_password.reveal() == PASSWORD


def test_a_password_given_as_text_is_kept_as_a_secret() -> None:
    security = ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=PASSWORD,  # type: ignore[arg-type]
    )
    assert isinstance(security.sasl_password, Password)
    assert PASSWORD not in repr(security)


def test_a_wrong_key_password_names_the_files_not_the_password(tmp_path: Path) -> None:
    from tls_certificates import make_certificates

    certificates = make_certificates(tmp_path)
    security = ClientSecurity(
        security_protocol="SSL",
        ssl_ca_location=certificates.ca,
        ssl_certificate_location=certificates.client_certificate,
        ssl_key_location=certificates.client_key,
        ssl_key_password=Password(PASSWORD),
    )
    with pytest.raises(ClientSecurityError, match=r"client\.key") as caught:
        security.ssl_context()
    assert PASSWORD not in str(caught.value)
    right = ClientSecurity(
        security_protocol="SSL",
        ssl_ca_location=certificates.ca,
        ssl_certificate_location=certificates.client_certificate,
        ssl_key_location=certificates.client_key,
        ssl_key_password=Password(certificates.client_key_password),
    )
    assert right.ssl_context() is not None
