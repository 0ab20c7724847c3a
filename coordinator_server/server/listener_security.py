"""The listener's `ListenerSecurity` from the settings: the enabled SASL mechanisms, each
with what starts a connection's exchange of it, and the principal of TLS client
certificates; and the warning a listener open beyond the loopback without authentication
deserves.

PLAIN's users come from `--sasl-plain-users-file`, read once at start. SCRAM's credentials
come from the log (`ScramCredentials`: the node's security image), read at each exchange,
so a user added with AlterUserScramCredentials can log in at once. OAUTHBEARER's keys come
from the JWKS file, read again whenever the file changes (a key rotation needs no restart).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from coordinator_server.authentication.oauthbearer import (
    Jwks,
    OAuthBearerSaslServer,
    OAuthBearerValidator,
    OAuthBearerValidatorConfig,
    load_jwks,
)
from coordinator_server.authentication.plain import PlainSaslServer, read_plain_users
from coordinator_server.authentication.sasl_server import SaslServer, ScramCredentials
from coordinator_server.authentication.scram import ScramSaslServer
from coordinator_server.authentication.ssl_principal_mapper import SslPrincipalMapper
from coordinator_server.security_settings import SecuritySettings
from coordinator_server.server.authentication import ListenerSecurity, SecurityProtocol

__all__ = ["build_listener_security", "exposure_warning"]


def build_listener_security(
    settings: SecuritySettings, *, tls: bool, scram_credentials: ScramCredentials
) -> ListenerSecurity:
    """The listener's security from the settings (`tls`: the listener serves TLS).

    Raises:
        ValueError: a users file or JWKS file that cannot be read or is malformed (the
            message names the file, never a password).
    """
    protocol = SecurityProtocol(settings.listener_protocol_with(tls=tls))
    mechanisms: dict[str, Callable[[], SaslServer]] = {}
    if protocol.uses_sasl:
        # One secret per process: an unknown user's stand-in salt stays the same for the
        # life of the node, so probing cannot tell unknown users from known ones.
        unknown_user_secret = secrets.token_bytes(32)
        for mechanism in settings.enabled_sasl_mechanisms:
            mechanisms[mechanism] = _mechanism(
                mechanism, settings, scram_credentials, unknown_user_secret
            )
    mapper = None
    if protocol.uses_tls and settings.ssl_client_auth != "none":
        mapper = SslPrincipalMapper(settings.ssl_principal_mapping_rules)
    return ListenerSecurity(
        protocol=protocol,
        mechanisms=mechanisms,
        ssl_principal=mapper,
        max_reauth_ms=settings.connections_max_reauth_ms,
        failed_authentication_delay_ms=settings.connection_failed_authentication_delay_ms,
        max_receive_bytes=settings.sasl_server_max_receive_size,
    )


def _mechanism(
    mechanism: str,
    settings: SecuritySettings,
    scram_credentials: ScramCredentials,
    unknown_user_secret: bytes,
) -> Callable[[], SaslServer]:
    if mechanism == "PLAIN":
        assert settings.sasl_plain_users_file is not None
        users = read_plain_users(settings.sasl_plain_users_file)
        return lambda: PlainSaslServer(users)
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return lambda: ScramSaslServer(
            mechanism, scram_credentials, unknown_user_secret=unknown_user_secret
        )
    if mechanism == "OAUTHBEARER":
        assert settings.sasl_oauthbearer_jwks_endpoint_url is not None
        audience = settings.sasl_oauthbearer_expected_audience or ""
        config = OAuthBearerValidatorConfig(
            expected_audiences=tuple(a.strip() for a in audience.split(",") if a.strip()),
            expected_issuer=settings.sasl_oauthbearer_expected_issuer,
            sub_claim_name=settings.sasl_oauthbearer_sub_claim_name,
            scope_claim_name=settings.sasl_oauthbearer_scope_claim_name,
            clock_skew_seconds=settings.sasl_oauthbearer_clock_skew_seconds,
        )
        keys = _JwksFile(settings.sasl_oauthbearer_jwks_endpoint_url)
        return lambda: OAuthBearerSaslServer(
            OAuthBearerValidator(config, keys.current()), time.time
        )
    raise ValueError(f"SASL mechanism {mechanism} is not supported")


class _JwksFile:
    """The JWKS file's keys, read again when the file changes; a file that becomes
    unreadable or malformed keeps the keys last read (logged by the caller's failures:
    tokens signed by new keys fail until the file is fixed)."""

    def __init__(self, location: str) -> None:
        self._location = location
        # The file itself, for its modification time (`load_jwks` parses the URL).
        is_url = location.lower().startswith("file:")
        self._path = Path(unquote(urlsplit(location).path) if is_url else location)
        self._stamp = self._stat()
        self._keys = load_jwks(location)

    def _stat(self) -> tuple[int, int]:
        try:
            stat = os.stat(self._path)
        except OSError:
            return (0, 0)
        return (stat.st_mtime_ns, stat.st_size)

    def current(self) -> Jwks:
        stamp = self._stat()
        if stamp != self._stamp and stamp != (0, 0):
            try:
                self._keys = load_jwks(self._location)
            except (OSError, ValueError):
                return self._keys
            self._stamp = stamp
        return self._keys


def exposure_warning(settings: SecuritySettings, *, host: str, tls: bool) -> str | None:
    """What to warn of when the listener on `host` is reachable beyond the loopback and
    nobody authenticates (None when it is not, or clients authenticate): anyone who reaches
    the port may read, rewind and delete every group's offsets and end any transaction."""
    protocol = SecurityProtocol(settings.listener_protocol_with(tls=tls))
    if protocol.uses_sasl or (protocol.uses_tls and settings.ssl_client_auth == "required"):
        return None
    if _loopback(host):
        return None
    return (
        f"the listener on {host} is reachable beyond this machine and does not authenticate "
        f"its clients (listener-security-protocol {protocol.value}): anyone who reaches it may "
        "read, rewind and delete any group's offsets and end any transaction; set "
        "--listener-security-protocol SASL_SSL (or SSL with --ssl-client-auth required) and "
        "--authorizer acls (docs/SECURITY.md)"
    )


def _loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A name: only the loopback's own names are known to stay on this machine.
        return False
