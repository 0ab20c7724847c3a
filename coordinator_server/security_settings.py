"""The settings of who may connect and what they may do: the listener's authentication
(Kafka's listener settings, under Kafka's names) and the authorizer's.

Apart from `config` because they are one concern of their own (the listener's trust), and
`config` holds every other; `CoordinatorConfig` inherits them, so they are options of
`serve` and environment variables like every other setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, JsonValue, field_validator

ListenerSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
AuthorizerKind = Literal["none", "acls", "kafka"]

SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# Kafka's defaults for the same settings.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE = 524_288


def _security() -> dict[str, JsonValue]:
    return {"group": "security"}


def _authorization() -> dict[str, JsonValue]:
    return {"group": "authorization"}


class SecuritySettings(BaseModel):
    listener_security_protocol: ListenerSecurityProtocol | None = Field(
        None,
        description="security.protocol of the listener: PLAINTEXT, SSL, SASL_PLAINTEXT or "
        "SASL_SSL (default: SSL with --tls-certfile, else PLAINTEXT).",
        json_schema_extra=_security(),
    )
    sasl_enabled_mechanisms: str | None = Field(
        None,
        description="sasl.enabled.mechanisms: a comma list of PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512, OAUTHBEARER (default: SCRAM-SHA-256 and SCRAM-SHA-512, with PLAIN "
        "when --sasl-plain-users-file is set and OAUTHBEARER when "
        "--sasl-oauthbearer-jwks-endpoint-url is).",
        json_schema_extra=_security(),
    )
    sasl_plain_users_file: Path | None = Field(
        None,
        description="The users of PLAIN: one name:password line each (what Kafka's "
        'PlainLoginModule lists as user_NAME="PASSWORD").',
        json_schema_extra=_security(),
    )
    ssl_client_auth: Literal["none", "requested", "required"] = Field(
        "none",
        description="ssl.client.auth: whether TLS clients show a certificate; its subject is "
        "their principal on an SSL listener.",
        json_schema_extra=_security(),
    )
    ssl_truststore_location: Path | None = Field(
        None,
        description="ssl.truststore.location (PEM): the CAs that sign client certificates.",
        json_schema_extra=_security(),
    )
    ssl_principal_mapping_rules: str = Field(
        "DEFAULT",
        description="ssl.principal.mapping.rules: from a certificate's distinguished name to "
        "a principal's name.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_jwks_endpoint_url: str | None = Field(
        None,
        description="sasl.oauthbearer.jwks.endpoint.url: the JWKS file (a path or a file: "
        "URL) whose keys sign OAUTHBEARER tokens.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_expected_audience: str | None = Field(
        None,
        description="sasl.oauthbearer.expected.audience: a comma list; a token must name one.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_expected_issuer: str | None = Field(
        None,
        description="sasl.oauthbearer.expected.issuer: the issuer a token must name.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_sub_claim_name: str = Field(
        "sub",
        description="sasl.oauthbearer.sub.claim.name: the claim that names the principal.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_scope_claim_name: str = Field(
        "scope",
        description="sasl.oauthbearer.scope.claim.name: the claim of a token's scopes.",
        json_schema_extra=_security(),
    )
    sasl_oauthbearer_clock_skew_seconds: int = Field(
        30,
        ge=0,
        description="sasl.oauthbearer.clock.skew.seconds: leeway on a token's times.",
        json_schema_extra=_security(),
    )
    connections_max_reauth_ms: int = Field(
        0,
        ge=0,
        description="connections.max.reauth.ms: how long a SASL session lasts before the "
        "client must authenticate again (KIP-368); 0: for ever.",
        json_schema_extra=_security(),
    )
    connection_failed_authentication_delay_ms: int = Field(
        DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
        ge=0,
        description="connection.failed.authentication.delay.ms: how long a failed "
        "authentication waits for its answer and the close.",
        json_schema_extra=_security(),
    )
    sasl_server_max_receive_size: int = Field(
        DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE,
        ge=1024,
        description="sasl.server.max.receive.size: the largest frame before authentication "
        "(a SASL token's limit).",
        json_schema_extra=_security(),
    )
    inter_node_command_config: Path | None = Field(
        None,
        description="How this node authenticates to the other nodes of its cluster: a "
        "properties file of Kafka's client settings (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.*), as the tools' --command-config.",
        json_schema_extra=_security(),
    )
    authorizer: AuthorizerKind = Field(
        "none",
        description="none: every client may do anything; acls: Kafka's ACLs kept in the log "
        "(CreateAcls, the acls tool); kafka: the data cluster's own ACLs, read through "
        "DescribeAcls.",
        json_schema_extra=_authorization(),
    )
    super_users: str | None = Field(
        None,
        description="super.users: a semicolon list of principals allowed everything.",
        json_schema_extra=_authorization(),
    )
    allow_everyone_if_no_acl_found: bool = Field(
        False,
        description="allow.everyone.if.no.acl.found: whether a resource without any ACL is "
        "open to everyone.",
        json_schema_extra=_authorization(),
    )
    authorizer_kafka_refresh_interval_ms: int = Field(
        1000,
        ge=100,
        description="With --authorizer kafka: how often the data cluster's ACLs are read "
        "again (DescribeAcls); a change there takes effect within this.",
        json_schema_extra=_authorization(),
    )
    authorizer_cache_entries: int = Field(
        100_000,
        ge=1,
        description="Most authorization decisions kept; all are dropped when an ACL changes.",
        json_schema_extra=_authorization(),
    )

    @field_validator("listener_security_protocol", mode="before")
    @classmethod
    def _protocol_in_upper_case(cls, value: object) -> object:
        # Kafka reads it in any case (sasl_ssl is SASL_SSL).
        return value.upper() if isinstance(value, str) else value

    def listener_protocol_with(self, *, tls: bool) -> ListenerSecurityProtocol:
        """The listener's security.protocol, its default applied (`tls`: a certificate is
        set)."""
        if self.listener_security_protocol is not None:
            return self.listener_security_protocol
        return "SSL" if tls else "PLAINTEXT"

    @property
    def enabled_sasl_mechanisms(self) -> list[str]:
        """The SASL mechanisms the listener enables, its default applied."""
        if self.sasl_enabled_mechanisms is not None:
            return [m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",") if m.strip()]
        mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        if self.sasl_plain_users_file is not None:
            mechanisms.insert(0, "PLAIN")
        if self.sasl_oauthbearer_jwks_endpoint_url is not None:
            mechanisms.append("OAUTHBEARER")
        return mechanisms

    @property
    def super_user_principals(self) -> list[str]:
        return [p.strip() for p in (self.super_users or "").split(";") if p.strip()]

    def check_security(self, *, tls: bool) -> None:
        """Refuse settings that cannot work together (`tls`: a certificate is set)."""
        protocol = self.listener_protocol_with(tls=tls)
        if protocol in ("SSL", "SASL_SSL") and not tls:
            raise ValueError(f"listener-security-protocol {protocol} needs --tls-certfile")
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and tls:
            raise ValueError(
                f"listener-security-protocol {protocol} with --tls-certfile: say SSL or SASL_SSL"
            )
        if self.ssl_client_auth != "none":
            if protocol not in ("SSL", "SASL_SSL"):
                raise ValueError("ssl-client-auth needs an SSL or SASL_SSL listener")
            if self.ssl_truststore_location is None:
                raise ValueError(
                    "ssl-client-auth needs --ssl-truststore-location (the CAs of the clients)"
                )
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanisms = self.enabled_sasl_mechanisms
            if not mechanisms:
                raise ValueError("sasl-enabled-mechanisms is empty")
            unknown = [m for m in mechanisms if m not in SUPPORTED_SASL_MECHANISMS]
            if unknown:
                raise ValueError(
                    f"sasl-enabled-mechanisms: {', '.join(unknown)} not supported (supported: "
                    f"{', '.join(SUPPORTED_SASL_MECHANISMS)})"
                )
            if "PLAIN" in mechanisms and self.sasl_plain_users_file is None:
                raise ValueError("PLAIN needs --sasl-plain-users-file")
            if "OAUTHBEARER" in mechanisms and self.sasl_oauthbearer_jwks_endpoint_url is None:
                raise ValueError("OAUTHBEARER needs --sasl-oauthbearer-jwks-endpoint-url")
        if self.connections_max_reauth_ms and protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError("connections-max-reauth-ms needs a SASL listener")
