"""How the RPC client secures its connections: Kafka's client settings, under Kafka's property
names, as one value (`ClientSecurity`), read from a Java .properties file as Kafka's tools
read their `--command-config` (`read_properties_file`).

The properties `ClientSecurity.from_properties` reads:

- `security.protocol`: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL, in any case.
- `sasl.mechanism`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER. It must be given
  with SASL: Kafka's default, GSSAPI, is not spoken here.
- The credentials: Kafka's `sasl.jaas.config` (one login module: `...plain.PlainLoginModule
  required username="a" password="b";`, `...scram.ScramLoginModule` likewise, or
  `...oauthbearer.OAuthBearerLoginModule required;`), or librdkafka's `sasl.username` and
  `sasl.password`.
- OAUTHBEARER's token, a JWT in a file, read again at each authentication (whatever renews the
  token rewrites the file): `sasl.oauthbearer.token.file` (this client's own name), or
  Kafka's `sasl.oauthbearer.token.endpoint.url` with a `file:` URL (Kafka's file-based
  token), or the JAAS option `tokenFile="PATH"` of OAuthBearerLoginModule (this client's own
  name too). The client fetches no token from an identity provider itself.
- TLS, librdkafka's names for PEM files: `ssl.ca.location` (the CAs to trust; default the
  system's), `ssl.certificate.location` and `ssl.key.location` (a client certificate, for
  mutual TLS), `ssl.key.password`; Kafka's Java names where they name PEM files:
  `ssl.truststore.location` with `ssl.truststore.type=PEM`, `ssl.keystore.location` with
  `ssl.keystore.type=PEM` (the key and its certificate chain in one file). Java key stores
  (JKS, PKCS12) are not read.
- `ssl.endpoint.identification.algorithm`: `https` (the default: the server's certificate
  must name the host connected to) or empty (not checked; the certificate is still verified).

Unknown names: a `security.*`, `sasl.*` or `ssl.*` property this client does not read is
refused, with its name, since ignoring one would connect otherwise than its author meant (a
JKS trust store, a login callback handler). Any other property (`request.timeout.ms`,
`client.id`, what Kafka's tools take in a shared file) is ignored with a WARNING naming it,
as Kafka's clients warn of settings supplied but not used.

Secrets (passwords, the key's password) are kept as `Password`s (Kafka's type of the same
name): never in a repr, a message or a log line. The token is never kept: it is read when an
exchange starts.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, cast, get_args
from urllib.parse import unquote, urlparse

from coordinator_client.rpc.sasl import (
    MECHANISMS,
    SCRAM_HASHES,
    OAuthBearerSaslClient,
    PlainSaslClient,
    SaslClient,
    ScramSaslClient,
)
from coordinator_protocol.errors import SaslAuthenticationFailedError

__all__ = [
    "ClientSecurity",
    "ClientSecurityError",
    "Password",
    "SecurityProtocol",
    "parse_jaas_config",
    "parse_properties",
    "read_properties_file",
]

log = logging.getLogger(__name__)

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
EndpointIdentification = Literal["https", "none"]

_PROTOCOLS: Final = get_args(SecurityProtocol)
_HIDDEN: Final = "**********"
_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTHBEARER_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Kafka's callback handler that reads `sasl.oauthbearer.token.endpoint.url` (its package moved
# between releases): naming it asks for what this client does anyway.
_TOKEN_CALLBACK_HANDLERS: Final = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    }
)
_CONTROL_FLAGS: Final = frozenset({"required", "requisite", "sufficient", "optional"})
_SECURITY_PREFIXES: Final = ("security.", "sasl.", "ssl.")
# The properties read; each carries its attribute's name or a role of its own.
_KNOWN: Final = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "sasl.oauthbearer.token.file",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.login.callback.handler.class",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
    }
)


class ClientSecurityError(ValueError):
    """Security settings that cannot be used: an unknown or contradictory property, a JAAS
    line that does not parse, a file that cannot be read. The message names the property and
    never holds a secret."""


class Password:
    """A secret setting (Kafka's `Password`): `reveal()` gives it; its repr and str never
    do."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Password('{_HIDDEN}')"

    def __str__(self) -> str:
        return _HIDDEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class ClientSecurity:
    """How every connection of a client to coordinator-server is secured, as Kafka's client
    settings say it; the default is Kafka's, PLAINTEXT. Build it from Kafka's property names
    with `from_properties` (the module docstring lists them), or directly.

    Attributes:
        security_protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT (SASL without TLS) or
            SASL_SSL (both).
        sasl_mechanism: with SASL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.
        sasl_username, sasl_password: PLAIN's and SCRAM's credentials (a str password is
            kept as a `Password`).
        sasl_oauthbearer_token_file: OAUTHBEARER's token (a JWT), read at each
            authentication.
        ssl_ca_location: PEM CAs to verify the server with (default: the system's).
        ssl_certificate_location, ssl_key_location: a client certificate (PEM) and its key,
            for mutual TLS; the key may be in the certificate's file.
        ssl_key_password: the key's password, if it has one.
        ssl_endpoint_identification_algorithm: "https" (the host name is checked against the
            server's certificate) or "none".
    """

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Password | None = None
    sasl_oauthbearer_token_file: Path | None = None
    ssl_ca_location: Path | None = None
    ssl_certificate_location: Path | None = None
    ssl_key_location: Path | None = None
    ssl_key_password: Password | None = None
    ssl_endpoint_identification_algorithm: EndpointIdentification = "https"
    # SCRAM's salted passwords by (salt, iterations), shared by the exchanges of every
    # connection made with these settings.
    _scram_cache: dict[tuple[bytes, int], bytes] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name in ("sasl_password", "ssl_key_password"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Password(value))
        if self.security_protocol not in _PROTOCOLS:
            raise ClientSecurityError(
                f"security.protocol {self.security_protocol!r} is not one of "
                f"{', '.join(_PROTOCOLS)}"
            )
        self._check_sasl()
        self._check_tls()

    def _check_sasl(self) -> None:
        mechanism = self.sasl_mechanism
        if not self.uses_sasl:
            given = [
                name
                for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                if getattr(self, name) is not None
            ]
            if self.sasl_oauthbearer_token_file is not None:
                given.append("sasl_oauthbearer_token_file")
            if given:
                raise ClientSecurityError(
                    f"SASL settings ({', '.join(_property(n) for n in given)}) are given but "
                    f"security.protocol is {self.security_protocol} (SASL_PLAINTEXT or "
                    "SASL_SSL use them)"
                )
            return
        if mechanism is None:
            raise ClientSecurityError(
                f"{self.security_protocol} needs sasl.mechanism: Kafka's default, GSSAPI, is "
                f"not spoken here; give one of {', '.join(MECHANISMS)}"
            )
        if mechanism not in MECHANISMS:
            raise ClientSecurityError(
                f"sasl.mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}"
            )
        if mechanism == "OAUTHBEARER":
            if self.sasl_oauthbearer_token_file is None:
                raise ClientSecurityError(
                    "OAUTHBEARER needs its token's file (sasl.oauthbearer.token.file)"
                )
            if self.sasl_username is not None or self.sasl_password is not None:
                raise ClientSecurityError(
                    "OAUTHBEARER authenticates with a token, not a user name and password"
                )
            return
        if self.sasl_oauthbearer_token_file is not None:
            raise ClientSecurityError(f"a token file is given but sasl.mechanism is {mechanism}")
        if not self.sasl_username:
            raise ClientSecurityError(
                f"{mechanism} needs a user name (sasl.jaas.config's username, or sasl.username)"
            )
        if self.sasl_password is None:
            raise ClientSecurityError(
                f"{mechanism} needs a password (sasl.jaas.config's password, or sasl.password)"
            )

    def _check_tls(self) -> None:
        files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        if not self.uses_tls and (
            any(f is not None for f in files) or self.ssl_key_password is not None
        ):
            raise ClientSecurityError(
                f"TLS files are given but security.protocol is {self.security_protocol} (SSL "
                "or SASL_SSL use them)"
            )
        if self.ssl_endpoint_identification_algorithm not in ("https", "none"):
            raise ClientSecurityError(
                "ssl.endpoint.identification.algorithm must be https or empty"
            )
        if self.ssl_key_location is not None and self.ssl_certificate_location is None:
            raise ClientSecurityError(
                "a key (ssl.key.location) is given without its certificate "
                "(ssl.certificate.location)"
            )
        if self.ssl_key_password is not None and self.ssl_certificate_location is None:
            raise ClientSecurityError("a key password is given without a client certificate")

    # What the settings mean

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def describe(self) -> str:
        """The protocol and who authenticates, for messages (never a secret)."""
        if not self.uses_sasl:
            return self.security_protocol
        if self.sasl_mechanism == "OAUTHBEARER":
            return f"{self.security_protocol}, OAUTHBEARER"
        return f"{self.security_protocol}, {self.sasl_mechanism} as {self.sasl_username}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of every connection, or None without TLS: the server verified
        against `ssl_ca_location` (else the system's CAs), its host name too unless the
        endpoint identification algorithm is none, and the client certificate presented.

        Raises:
            ClientSecurityError: a file cannot be read, or the key does not open.
        """
        if not self.uses_tls:
            return None
        cafile = None if self.ssl_ca_location is None else str(self.ssl_ca_location)
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        except (OSError, ssl.SSLError) as error:
            raise ClientSecurityError(
                f"cannot read the CA file {self.ssl_ca_location} (ssl.ca.location): "
                f"{_reason(error)}"
            ) from None
        context.check_hostname = self.ssl_endpoint_identification_algorithm == "https"
        if self.ssl_certificate_location is not None:
            password = self.ssl_key_password
            try:
                context.load_cert_chain(
                    str(self.ssl_certificate_location),
                    None if self.ssl_key_location is None else str(self.ssl_key_location),
                    # A callable: a key that needs a password and got none fails instead of
                    # asking on the terminal.
                    password=lambda: "" if password is None else password.reveal(),
                )
            except (OSError, ssl.SSLError) as error:
                key = self.ssl_key_location or self.ssl_certificate_location
                raise ClientSecurityError(
                    f"cannot load the client certificate {self.ssl_certificate_location} and "
                    f"its key {key} (wrong ssl.key.password?): {_reason(error)}"
                ) from None
        return context

    def sasl_client(self) -> SaslClient:
        """A new exchange of the SASL mechanism (one per authentication, re-authentications
        too); OAUTHBEARER's token is read from its file now.

        Raises:
            SaslAuthenticationFailedError: the token's file cannot be read or is empty.
        """
        mechanism = self.sasl_mechanism
        if not self.uses_sasl or mechanism is None:
            raise ValueError(f"{self.security_protocol} does not authenticate with SASL")
        if mechanism == "OAUTHBEARER":
            assert self.sasl_oauthbearer_token_file is not None
            return OAuthBearerSaslClient(_read_token(self.sasl_oauthbearer_token_file))
        assert self.sasl_username is not None and self.sasl_password is not None
        if mechanism in SCRAM_HASHES:
            return ScramSaslClient(
                mechanism,
                self.sasl_username,
                self.sasl_password.reveal(),
                cache=self._scram_cache,
            )
        return PlainSaslClient(self.sasl_username, self.sasl_password.reveal())

    # From Kafka's properties

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        """The settings Kafka's client properties give (the module docstring lists them; a
        value's surrounding blanks are ignored, as Kafka's configs ignore them).

        Raises:
            ClientSecurityError: naming the property that cannot be used.
        """
        values = {name: str(value).strip() for name, value in properties.items()}
        unread = [name for name in values if name not in _KNOWN]
        refused = [name for name in unread if name.startswith(_SECURITY_PREFIXES)]
        if refused:
            raise ClientSecurityError(
                f"unsupported security properties: {', '.join(sorted(refused))} (this client "
                "reads security.protocol, sasl.mechanism, sasl.jaas.config, sasl.username, "
                "sasl.password, sasl.oauthbearer.token.file, ssl.*.location, ssl.key.password, "
                "ssl.endpoint.identification.algorithm, and PEM trust and key stores)"
            )
        if unread:
            log.warning(
                "these properties are not security settings and are ignored: %s",
                ", ".join(sorted(unread)),
            )
        protocol = values.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise ClientSecurityError(
                f"security.protocol {values['security.protocol']!r} is not one of "
                f"{', '.join(_PROTOCOLS)}"
            )
        mechanism = values.get("sasl.mechanism")
        mechanism = mechanism.upper() if mechanism else None
        username, password, token_file = _credentials(values, mechanism)
        algorithm = values.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", ""):
            raise ClientSecurityError(
                f"ssl.endpoint.identification.algorithm {algorithm!r} is not https or empty"
            )
        ca, certificate, key = _pem_files(values)
        key_password = values.get("ssl.key.password")
        return cls(
            security_protocol=cast(SecurityProtocol, protocol),
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=None if password is None else Password(password),
            sasl_oauthbearer_token_file=token_file,
            ssl_ca_location=ca,
            ssl_certificate_location=certificate,
            ssl_key_location=key,
            ssl_key_password=None if key_password is None else Password(key_password),
            ssl_endpoint_identification_algorithm="https" if algorithm == "https" else "none",
        )


def _credentials(
    values: Mapping[str, str], mechanism: str | None
) -> tuple[str | None, str | None, Path | None]:
    """(user name, password, token file) from the JAAS line or librdkafka's properties."""
    username = values.get("sasl.username")
    password = values.get("sasl.password")
    token_files: list[tuple[str, Path]] = []
    if "sasl.oauthbearer.token.file" in values:
        token_files.append(
            ("sasl.oauthbearer.token.file", Path(values["sasl.oauthbearer.token.file"]))
        )
    if "sasl.oauthbearer.token.endpoint.url" in values:
        token_files.append(
            (
                "sasl.oauthbearer.token.endpoint.url",
                _token_file_url(values["sasl.oauthbearer.token.endpoint.url"]),
            )
        )
    handler = values.get("sasl.login.callback.handler.class")
    if handler is not None and handler not in _TOKEN_CALLBACK_HANDLERS:
        raise ClientSecurityError(
            f"sasl.login.callback.handler.class {handler!r}: only Kafka's "
            "OAuthBearerLoginCallbackHandler with a file-based token is supported"
        )
    jaas = values.get("sasl.jaas.config")
    if jaas is not None:
        if username is not None or password is not None:
            raise ClientSecurityError(
                "give the credentials in sasl.jaas.config or in sasl.username and "
                "sasl.password, not both"
            )
        module, options = parse_jaas_config(jaas)
        expected = {
            "PLAIN": _PLAIN_MODULE,
            "SCRAM-SHA-256": _SCRAM_MODULE,
            "SCRAM-SHA-512": _SCRAM_MODULE,
            "OAUTHBEARER": _OAUTHBEARER_MODULE,
        }.get(mechanism or "")
        if expected is not None and module != expected:
            raise ClientSecurityError(
                f"sasl.jaas.config names {module}, but sasl.mechanism {mechanism} takes {expected}"
            )
        if module == _OAUTHBEARER_MODULE:
            if any(name.startswith("unsecuredLogin") for name in options):
                raise ClientSecurityError(
                    "sasl.jaas.config: unsecured OAUTHBEARER tokens (unsecuredLogin...) are "
                    "not supported: give a signed token in a file"
                )
            _only_options(options, {"tokenFile"}, module)
            if "tokenFile" in options:
                token_files.append(("sasl.jaas.config's tokenFile", Path(options["tokenFile"])))
        elif module in (_PLAIN_MODULE, _SCRAM_MODULE):
            _only_options(options, {"username", "password"}, module)
            username, password = options.get("username"), options.get("password")
        else:
            raise ClientSecurityError(
                f"sasl.jaas.config: the login module {module} is not supported (give "
                f"{_PLAIN_MODULE}, {_SCRAM_MODULE} or {_OAUTHBEARER_MODULE})"
            )
    if len(token_files) > 1:
        raise ClientSecurityError(
            "the token file is given twice: "
            + " and ".join(name for name, _ in token_files)
            + "; give one"
        )
    return username, password, token_files[0][1] if token_files else None


def _only_options(options: Mapping[str, str], allowed: set[str], module: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ClientSecurityError(
            f"sasl.jaas.config: {module} options not supported here: {', '.join(unknown)}"
        )


def _token_file_url(url: str) -> Path:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ClientSecurityError(
            "sasl.oauthbearer.token.endpoint.url: only a file: URL (a file holding the "
            "token) is supported; this client fetches no token from an identity provider"
        )
    return Path(unquote(parsed.path))


def _pem_files(values: Mapping[str, str]) -> tuple[Path | None, Path | None, Path | None]:
    """(CA file, certificate file, key file) from librdkafka's names or Kafka's PEM stores."""
    ca = _path(values.get("ssl.ca.location"))
    certificate = _path(values.get("ssl.certificate.location"))
    key = _path(values.get("ssl.key.location"))
    stores = (("truststore", "ssl.ca.location"), ("keystore", "ssl.certificate.location"))
    for store, role in stores:
        location = _path(values.get(f"ssl.{store}.location"))
        kind = values.get(f"ssl.{store}.type", "JKS").upper()
        if location is None:
            continue
        if kind != "PEM":
            raise ClientSecurityError(
                f"ssl.{store}.type {kind}: only PEM files are read (give ssl.{store}.type=PEM "
                f"with a PEM file, or {role})"
            )
        if store == "truststore":
            if ca is not None:
                raise ClientSecurityError(
                    "give ssl.ca.location or ssl.truststore.location, not both"
                )
            ca = location
        else:
            if certificate is not None or key is not None:
                raise ClientSecurityError(
                    "give ssl.keystore.location or ssl.certificate.location and "
                    "ssl.key.location, not both"
                )
            certificate = location
    return ca, certificate, key


def _path(value: str | None) -> Path | None:
    return None if not value else Path(value)


def _property(attribute: str) -> str:
    return attribute.replace("_", ".")


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise SaslAuthenticationFailedError(
            f"cannot read the OAUTHBEARER token file {path}: {_reason(error)}"
        ) from None
    if not token:
        raise SaslAuthenticationFailedError(f"the OAUTHBEARER token file {path} is empty")
    return token


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


# Kafka's JAAS line


_JAAS_TOKEN: Final = re.compile(
    r"""
    \s+ | //[^\n]* | /\*.*?\*/                      # blanks and comments
    | (?P<quoted>"(?:[^"\\]|\\.)*")                 # a quoted value
    | (?P<unterminated>")                           # a quote never closed
    | (?P<punct>[=;])
    | (?P<word>[^\s=;"]+)
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "b": "\b"}


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """Kafka's `sasl.jaas.config`: one login module, its control flag and its options, ended
    by ';' (`<LoginModule> required name="value" ...;`); values quoted with '"' (backslash
    escapes) or bare. Returns (the login module's class, its options).

    Raises:
        ClientSecurityError: the line does not parse, or holds no or several modules; the
            message never quotes the line (it holds a password).
    """
    tokens: list[tuple[str, str]] = []
    for match in _JAAS_TOKEN.finditer(text):
        kind = match.lastgroup
        if kind is None:
            continue
        if kind == "unterminated":
            raise ClientSecurityError("sasl.jaas.config: a quoted value is not closed")
        value = match.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), value[1:-1])
        tokens.append((kind, value))
    modules: list[tuple[str, dict[str, str]]] = []
    position = 0
    while position < len(tokens):
        kind, module = tokens[position]
        if kind != "word":
            raise ClientSecurityError("sasl.jaas.config: a login module's class is expected")
        if position + 1 >= len(tokens) or tokens[position + 1][0] != "word":
            raise ClientSecurityError(f"sasl.jaas.config: {module} needs a control flag (required)")
        flag = tokens[position + 1][1]
        if flag.lower() not in _CONTROL_FLAGS:
            raise ClientSecurityError(
                f"sasl.jaas.config: {module}'s control flag is not one of "
                f"{', '.join(sorted(_CONTROL_FLAGS))}"
            )
        position += 2
        options: dict[str, str] = {}
        while True:
            if position >= len(tokens):
                raise ClientSecurityError(
                    "sasl.jaas.config: the login module does not end with ';'"
                )
            kind, name = tokens[position]
            if (kind, name) == ("punct", ";"):
                position += 1
                break
            if (
                kind != "word"
                or position + 2 >= len(tokens)
                or tokens[position + 1] != ("punct", "=")
                or tokens[position + 2][0] not in ("word", "quoted")
            ):
                raise ClientSecurityError(
                    f"sasl.jaas.config: {module}'s options are not name=value pairs"
                )
            options[name] = tokens[position + 2][1]
            position += 3
        modules.append((module, options))
    if len(modules) != 1:
        raise ClientSecurityError(
            f"sasl.jaas.config holds {len(modules)} login modules; it must hold one"
        )
    return modules[0]


# Java .properties files


def read_properties_file(path: str | Path) -> dict[str, str]:
    """A Java .properties file (as Kafka's tools read `--command-config`), read as UTF-8:
    `key=value`, `key: value` or `key value` lines, `#` and `!` comments, a line ending in a
    backslash continued on the next, Java's escapes (`\\t`, `\\uXXXX`, ...). A key given
    twice keeps its last value.

    Raises:
        ClientSecurityError: the file cannot be read, or holds a bad escape.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ClientSecurityError(f"cannot read {path}: {_reason(error)}") from None
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """The properties of a .properties file's text (`read_properties_file`)."""
    lines = re.split(r"\r\n|\r|\n", text)
    properties: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(" \t\f")
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index >= len(lines):
                break
            line += lines[index].lstrip(" \t\f")
            index += 1
        key, value = _split_property(line)
        properties[_unescape(key)] = _unescape(value)
    return properties


def _continues(line: str) -> bool:
    """Whether a line ends in an odd number of backslashes (the last one escapes the end)."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    # The key ends at the first '=', ':' or blank not escaped; then blanks, at most one
    # '=' or ':', and blanks again come before the value (Java's Properties.load).
    end = len(line)
    escaped = False
    separator = False
    for position, char in enumerate(line):
        if not escaped and char in "=:":
            end, separator = position, True
            break
        if not escaped and char in " \t\f":
            end = position
            break
        escaped = char == "\\" and not escaped
    start = end + 1 if end < len(line) else end
    while start < len(line):
        char = line[start]
        if char not in " \t\f":
            if not separator and char in "=:":
                separator = True
            else:
                break
        start += 1
    return line[:end], line[start:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char != "\\" or position >= len(text):
            if char != "\\":
                out.append(char)
            continue
        char = text[position]
        position += 1
        if char == "u":
            digits = text[position : position + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ClientSecurityError("a malformed \\uXXXX escape in the properties")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_ESCAPES.get(char, char) if char != "b" else "b")
    return "".join(out)
