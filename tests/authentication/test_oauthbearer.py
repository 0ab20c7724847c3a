"""SASL OAUTHBEARER's server side: JWT validation with Kafka's KIP-768 settings, the JWKS,
the RFC 7628 initial response as Kafka parses it, and the exchange with its error step."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from coordinator_server.authentication.oauthbearer import (
    Jwks,
    OAuthBearerSaslServer,
    OAuthBearerValidator,
    OAuthBearerValidatorConfig,
    ValidatedToken,
    load_jwks,
    parse_client_initial_response,
)
from coordinator_server.authentication.sasl_server import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslServer,
)

NOW = 1_700_000_000.0
SKEW = 30


@dataclass(frozen=True)
class Keys:
    signer: rsa.RSAPrivateKey
    ec_signer: ec.EllipticCurvePrivateKey
    forger: rsa.RSAPrivateKey


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        signer=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec_signer=ec.generate_private_key(ec.SECP256R1()),
        forger=rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


def rsa_jwk(key: rsa.RSAPrivateKey, **members: Any) -> dict[str, Any]:
    jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, **members}


def ec_jwk(key: ec.EllipticCurvePrivateKey, **members: Any) -> dict[str, Any]:
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, **members}


@pytest.fixture(scope="module")
def jwks_document(keys: Keys) -> dict[str, Any]:
    return {
        "keys": [
            rsa_jwk(keys.signer, kid="rsa-1", use="sig"),
            ec_jwk(keys.ec_signer, kid="ec-1", alg="ES256"),
        ]
    }


@pytest.fixture(scope="module")
def jwks(jwks_document: dict[str, Any]) -> Jwks:
    return Jwks.from_dict(jwks_document)


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sub": "alice",
        "iat": int(NOW) - 60,
        "exp": int(NOW) + 600,
        "scope": "read write",
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(
    payload: dict[str, Any],
    key: Any,
    kid: str | None = "rsa-1",
    algorithm: str = "RS256",
) -> str:
    headers = {} if kid is None else {"kid": kid}
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def validator(jwks: Jwks, **settings: Any) -> OAuthBearerValidator:
    return OAuthBearerValidator(OAuthBearerValidatorConfig(**settings), jwks)


def refusal(check: OAuthBearerValidator, token: str, now: float = NOW) -> str:
    with pytest.raises(AuthenticationFailed) as refused:
        check.validate(token, now)
    message = str(refused.value)
    assert token not in message
    return message


def initial_response(token: str, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01{extensions}\x01".encode()


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def server(jwks: Jwks, now: float = NOW, **settings: Any) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(validator(jwks, **settings), Clock(now))


# The validator.


def test_a_valid_rsa_token_gives_its_principal_scopes_and_times(keys: Keys, jwks: Jwks) -> None:
    token = sign(claims(), keys.signer)

    assert validator(jwks).validate(token, NOW) == ValidatedToken(
        principal_name="alice",
        scopes=frozenset({"read", "write"}),
        expires_at_s=NOW + 600,
        issued_at_s=NOW - 60,
    )


@pytest.mark.parametrize("algorithm", ["RS256", "RS384", "RS512", "PS256", "PS512"])
def test_an_rsa_key_without_alg_verifies_each_rsa_algorithm(
    keys: Keys, jwks: Jwks, algorithm: str
) -> None:
    token = sign(claims(), keys.signer, algorithm=algorithm)

    assert validator(jwks).validate(token, NOW).principal_name == "alice"


def test_a_valid_ec_token(keys: Keys, jwks: Jwks) -> None:
    token = sign(claims(sub="bob"), keys.ec_signer, kid="ec-1", algorithm="ES256")

    assert validator(jwks).validate(token, NOW).principal_name == "bob"


def test_a_valid_eddsa_token() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    keyset = Jwks.from_dict(
        {"keys": [{**OKPAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "ed"}]}
    )
    token = sign(claims(sub="erin"), key, kid="ed", algorithm="EdDSA")

    assert validator(keyset).validate(token, NOW).principal_name == "erin"


def test_a_key_declaring_its_alg_verifies_no_other(keys: Keys) -> None:
    keyset = Jwks.from_dict({"keys": [rsa_jwk(keys.signer, kid="rsa-1", alg="RS256")]})
    token = sign(claims(), keys.signer, algorithm="PS256")

    assert "does not fit" in refusal(validator(keyset), token)
    assert validator(keyset).validate(sign(claims(), keys.signer), NOW).principal_name == "alice"


def test_an_algorithm_the_config_does_not_allow_is_refused(keys: Keys, jwks: Jwks) -> None:
    only_ec = validator(jwks, allowed_algorithms=frozenset({"ES256"}))

    assert refusal(only_ec, sign(claims(), keys.signer)) == "token algorithm not accepted"


def test_an_expired_token_is_refused_beyond_the_clock_skew(keys: Keys, jwks: Jwks) -> None:
    expired = sign(claims(exp=int(NOW) - SKEW, iat=int(NOW) - 3600), keys.signer)
    within_skew = sign(claims(exp=int(NOW) - SKEW + 1, iat=int(NOW) - 3600), keys.signer)

    assert refusal(validator(jwks), expired) == "token expired"
    assert validator(jwks).validate(within_skew, NOW).expires_at_s == NOW - SKEW + 1
    assert refusal(validator(jwks, clock_skew_seconds=0), within_skew) == "token expired"


def test_a_token_not_yet_valid_is_refused_beyond_the_clock_skew(keys: Keys, jwks: Jwks) -> None:
    early = sign(claims(nbf=int(NOW) + SKEW + 1), keys.signer)
    within_skew = sign(claims(nbf=int(NOW) + SKEW), keys.signer)

    assert refusal(validator(jwks), early) == "token not yet valid"
    assert validator(jwks).validate(within_skew, NOW).principal_name == "alice"


def test_a_token_issued_in_the_future_is_refused(keys: Keys, jwks: Jwks) -> None:
    token = sign(claims(iat=int(NOW) + SKEW + 1), keys.signer)

    assert refusal(validator(jwks), token) == "token issued in the future"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": None}, "token has no valid expiry (exp)"),
        ({"exp": "tomorrow"}, "token has no valid expiry (exp)"),
        ({"exp": True}, "token has no valid expiry (exp)"),
        ({"iat": None}, "token has no valid issue time (iat)"),
        ({"nbf": "now"}, "token has an invalid not-before time (nbf)"),
    ],
)
def test_exp_and_iat_are_required_times(
    keys: Keys, jwks: Jwks, overrides: dict[str, Any], reason: str
) -> None:
    assert refusal(validator(jwks), sign(claims(**overrides), keys.signer)) == reason


def test_the_audience_must_be_one_of_the_expected(keys: Keys, jwks: Jwks) -> None:
    check = validator(jwks, expected_audiences=("kafka", "coordinator"))

    assert check.validate(sign(claims(aud="coordinator"), keys.signer), NOW).principal_name
    assert check.validate(sign(claims(aud=["other", "kafka"]), keys.signer), NOW).principal_name
    assert refusal(check, sign(claims(aud="other"), keys.signer)).startswith(
        "audience not accepted"
    )
    assert refusal(check, sign(claims(), keys.signer)).startswith("audience not accepted")
    assert refusal(check, sign(claims(aud=7), keys.signer)) == "audience claim malformed"


def test_without_an_expected_audience_a_token_with_one_is_refused_as_kafka_does(
    keys: Keys, jwks: Jwks
) -> None:
    assert validator(jwks).validate(sign(claims(), keys.signer), NOW).principal_name == "alice"
    assert refusal(validator(jwks), sign(claims(aud="kafka"), keys.signer)).startswith(
        "audience not accepted"
    )


def test_the_issuer_must_be_the_expected_one(keys: Keys, jwks: Jwks) -> None:
    check = validator(jwks, expected_issuer="https://idp.example")

    assert check.validate(sign(claims(iss="https://idp.example"), keys.signer), NOW).principal_name
    assert refusal(check, sign(claims(iss="https://evil.example"), keys.signer)) == (
        "issuer not accepted"
    )
    assert refusal(check, sign(claims(), keys.signer)) == "issuer not accepted"
    assert validator(jwks).validate(sign(claims(iss="anyone"), keys.signer), NOW).principal_name


def test_an_unknown_kid_is_refused(keys: Keys, jwks: Jwks) -> None:
    assert refusal(validator(jwks), sign(claims(), keys.signer, kid="rsa-2")) == (
        "token signing key unknown"
    )
    assert refusal(validator(jwks), sign(claims(), keys.signer, kid=None)) == (
        "token signing key unknown"
    )


def test_a_token_signed_by_another_key_with_the_same_kid_is_forged(keys: Keys, jwks: Jwks) -> None:
    forged = sign(claims(sub="admin"), keys.forger, kid="rsa-1")

    assert refusal(validator(jwks), forged) == "signature invalid"


def test_a_tampered_payload_breaks_the_signature(keys: Keys, jwks: Jwks) -> None:
    header, _, signature = sign(claims(), keys.signer).split(".")
    payload = b64(json.dumps(claims(sub="admin")).encode())

    assert refusal(validator(jwks), f"{header}.{payload}.{signature}") == "signature invalid"


def test_alg_none_is_refused(jwks: Jwks) -> None:
    unsigned = jwt.encode(claims(), "", algorithm="none", headers={"kid": "rsa-1"})

    assert unsigned.endswith(".")
    assert refusal(validator(jwks), unsigned).startswith("token malformed")
    assert refusal(validator(jwks), unsigned + "c2ln") == "token algorithm not accepted"


def test_an_hmac_token_is_refused_even_keyed_with_the_public_key(keys: Keys, jwks: Jwks) -> None:
    # The key confusion attack: an HMAC keyed with what the server publishes.
    secret = keys.signer.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = b64(json.dumps(claims()).encode())
    mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    token = f"{header}.{payload}.{b64(mac)}"

    assert refusal(validator(jwks), token) == "token algorithm not accepted"
    assert refusal(
        validator(jwks), sign(claims(), b"a-shared-secret-of-32-bytes-long", algorithm="HS256")
    ) == ("token algorithm not accepted")


@pytest.mark.parametrize(
    "token", ["", "abc", "a.b", "a.b.c.d", "a..c", "!!!.e30.c2ln", "e30.e30.c2ln"]
)
def test_a_token_that_is_no_jwt_is_malformed(jwks: Jwks, token: str) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        validator(jwks).validate(token, NOW)

    assert str(refused.value).startswith(("token malformed", "token algorithm not accepted"))


def test_the_subject_is_required_and_trimmed(keys: Keys, jwks: Jwks) -> None:
    assert refusal(validator(jwks), sign(claims(sub=None), keys.signer)) == (
        "subject claim (sub) missing or empty"
    )
    assert refusal(validator(jwks), sign(claims(sub="  "), keys.signer)) == (
        "subject claim (sub) missing or empty"
    )
    assert refusal(validator(jwks), sign(claims(sub=42), keys.signer)) == (
        "subject claim (sub) missing or empty"
    )
    assert validator(jwks).validate(
        sign(claims(sub=" carol "), keys.signer), NOW
    ).principal_name == ("carol")


def test_a_custom_subject_claim_names_the_principal(keys: Keys, jwks: Jwks) -> None:
    check = validator(jwks, sub_claim_name="email")
    token = sign(claims(email="dave@example.com"), keys.signer)

    assert check.validate(token, NOW).principal_name == "dave@example.com"
    assert refusal(check, sign(claims(), keys.signer)) == "subject claim (email) missing or empty"


@pytest.mark.parametrize(
    ("scope", "scopes"),
    [
        ("read", {"read"}),
        ("read write admin", {"read", "write", "admin"}),
        (["read", "write"], {"read", "write"}),
        ([], set()),
        (None, set()),
        (7, set()),
        ({"read": True}, set()),
    ],
)
def test_scope_parsing(keys: Keys, jwks: Jwks, scope: Any, scopes: set[str]) -> None:
    token = sign(claims(scope=scope), keys.signer)

    assert validator(jwks).validate(token, NOW).scopes == scopes


@pytest.mark.parametrize(
    "scope", ["", "read  write", "read read", ["read", "read"], ["a", " "], [1]]
)
def test_an_empty_or_repeated_scope_refuses_the_token(keys: Keys, jwks: Jwks, scope: Any) -> None:
    assert refusal(validator(jwks), sign(claims(scope=scope), keys.signer)).startswith(
        "scope claim (scope)"
    )


def test_a_custom_scope_claim(keys: Keys, jwks: Jwks) -> None:
    check = validator(jwks, scope_claim_name="scp")
    token = sign(claims(scp=["topics:read"]), keys.signer)

    assert check.validate(token, NOW).scopes == {"topics:read"}


@pytest.mark.parametrize(
    "settings",
    [
        {"allowed_algorithms": frozenset({"none"})},
        {"allowed_algorithms": frozenset({"RS256", "HS256"})},
        {"allowed_algorithms": frozenset()},
        {"clock_skew_seconds": -1},
        {"sub_claim_name": " "},
        {"scope_claim_name": ""},
    ],
)
def test_settings_that_cannot_hold_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        OAuthBearerValidatorConfig(**settings)


def test_the_config_defaults_are_kafkas() -> None:
    config = OAuthBearerValidatorConfig(expected_audiences=["a", "b"])  # type: ignore[arg-type]

    assert config.expected_audiences == ("a", "b")
    assert config.expected_issuer is None
    assert (config.sub_claim_name, config.scope_claim_name) == ("sub", "scope")
    assert config.clock_skew_seconds == 30
    assert "RS256" in config.allowed_algorithms
    assert not {"none", "HS256", "HS384", "HS512"} & config.allowed_algorithms


# The JWKS.


def test_a_single_key_without_kid_verifies_any_token(keys: Keys) -> None:
    keyset = Jwks.from_dict({"keys": [rsa_jwk(keys.signer)]})

    assert len(keyset) == 1
    assert keyset.key_ids == frozenset()
    for kid in (None, "whatever"):
        token = sign(claims(), keys.signer, kid=kid)
        assert validator(keyset).validate(token, NOW).principal_name == "alice"


def test_a_single_named_key_verifies_a_token_without_kid(keys: Keys) -> None:
    keyset = Jwks.from_dict({"keys": [rsa_jwk(keys.signer, kid="only")]})

    assert validator(keyset).validate(sign(claims(), keys.signer, kid=None), NOW).principal_name


def test_keys_that_are_not_public_signing_keys_are_left_out(keys: Keys) -> None:
    keyset = Jwks.from_dict(
        {
            "keys": [
                {**RSAAlgorithm.to_jwk(keys.forger, as_dict=True), "kid": "signing-only"},
                {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                rsa_jwk(keys.forger, kid="enc", use="enc"),
                rsa_jwk(keys.forger, kid="wrap", key_ops=["wrapKey"]),
                rsa_jwk(keys.forger, kid="oaep", alg="RSA-OAEP"),
                {"kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA", "kid": "k1"},
                rsa_jwk(keys.signer, kid="rsa-1"),
            ]
        }
    )

    assert keyset.key_ids == {"rsa-1"}


def test_a_published_private_key_only_verifies(keys: Keys) -> None:
    private = RSAAlgorithm.to_jwk(keys.signer, as_dict=True)
    del private["key_ops"]
    keyset = Jwks.from_dict({"keys": [{**private, "kid": "rsa-1"}]})

    assert validator(keyset).validate(sign(claims(), keys.signer), NOW).principal_name == "alice"


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"keys": []}, "no usable signing key"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "no usable signing key"),
        ({"nokeys": []}, "not a JWK set"),
        ({"keys": ["rsa"]}, "key 0 is not a JSON object"),
        ({"keys": [{"kid": "x"}]}, "key 0 has no 'kty'"),
        ({"keys": [{"kty": "RSA", "kid": "bad", "n": "!!", "e": "AQAB"}]}, "malformed"),
        ({"keys": [{"kty": "RSA", "kid": 5, "n": "AQAB", "e": "AQAB"}]}, "'kid'"),
    ],
)
def test_a_set_without_usable_keys_or_with_a_malformed_one_is_refused(
    document: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match="issuer-keys") as refused:
        Jwks.from_dict(document, source="issuer-keys")

    assert complaint in str(refused.value)


def test_keys_without_kid_beside_others_or_repeated_kids_are_refused(keys: Keys) -> None:
    with pytest.raises(ValueError, match="without 'kid'"):
        Jwks.from_dict({"keys": [rsa_jwk(keys.signer), ec_jwk(keys.ec_signer, kid="ec-1")]})
    with pytest.raises(ValueError, match="more than one key"):
        Jwks.from_dict({"keys": [rsa_jwk(keys.signer, kid="k"), ec_jwk(keys.ec_signer, kid="k")]})


@pytest.fixture
def jwks_file(tmp_path: Path, jwks_document: dict[str, Any]) -> Iterator[Path]:
    path = tmp_path / "jwks dir" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps(jwks_document))
    yield path


def test_load_jwks_from_a_plain_path(jwks_file: Path, keys: Keys) -> None:
    for location in (str(jwks_file), jwks_file):
        keyset = load_jwks(location)
        assert keyset.key_ids == {"rsa-1", "ec-1"}
        assert validator(keyset).validate(sign(claims(), keys.signer), NOW).principal_name


def test_load_jwks_from_a_file_url(jwks_file: Path) -> None:
    assert load_jwks(jwks_file.as_uri()).key_ids == {"rsa-1", "ec-1"}
    assert load_jwks(f"file://localhost{jwks_file}").key_ids == {"rsa-1", "ec-1"}
    assert load_jwks(f"file:{jwks_file}").key_ids == {"rsa-1", "ec-1"}


def test_load_jwks_refuses_a_file_url_of_another_host(jwks_file: Path) -> None:
    with pytest.raises(ValueError, match="another host"):
        load_jwks(f"file://idp.example{jwks_file}")


@pytest.mark.parametrize("content", ["{not json", "", '["keys"]', '{"keys": [1]}', "\xff"])
def test_load_jwks_names_the_file_that_is_no_jwks(tmp_path: Path, content: str) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content.encode("latin-1"))

    with pytest.raises(ValueError, match=r"broken\.json"):
        load_jwks(path)


def test_load_jwks_of_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_jwks(tmp_path / "absent.json")


# The client's initial response.


def test_kafkas_initial_response_parses() -> None:
    response = parse_client_initial_response(
        b"n,,\x01auth=Bearer abc.def-_.ghi\x01traceId=x=1 \t\x01traceId=last\x01other=v\x01\x01"
    )

    assert response.token == "abc.def-_.ghi"
    assert response.authorization_id == ""
    assert response.extensions == {"traceId": "last", "other": "v"}


def test_the_authorization_id_is_decoded() -> None:
    response = parse_client_initial_response(initial_response("t", authzid="a=2Cb=3Dc"))

    assert response.authorization_id == "a,b=c"


def test_the_scheme_is_bearer_in_any_case() -> None:
    assert parse_client_initial_response(b"n,,\x01auth=BEARER   tok\x01\x01").token == "tok"


@pytest.mark.parametrize(
    "response",
    [
        b"n,,\x01\x01",  # no auth
        b"n,,\x01host=server\x01\x01",  # no auth among the pairs
        b"y,,\x01auth=Bearer tok\x01\x01",  # a GS2 header asking for channel binding
        b"p=tls-unique,,\x01auth=Bearer tok\x01\x01",
        b"n,\x01auth=Bearer tok\x01\x01",  # the GS2 header without its second comma
        b",,\x01auth=Bearer tok\x01\x01",
        b"n,a=x,y,\x01auth=Bearer tok\x01\x01",  # a raw comma in the authzid
        b"n,,\x01auth=Bearer tok\x01",  # not terminated by \x01\x01
        b"n,,auth=Bearer tok\x01\x01",  # no separator after the GS2 header
        b"n,,\x01auth=Basic dXNlcjpwYXNz\x01\x01",  # another scheme
        b"n,,\x01auth=Bearer\x01\x01",  # no token
        b"n,,\x01auth=Bearer tok/en\x01\x01",  # not a token's characters
        b"n,,\x01auth=Bearer tok\x01ext-1=v\x01\x01",  # an extension key outside [A-Za-z]
        b"n,,\x01auth=Bearer tok\x01ext=\x01\x01",  # an empty extension value
        b"n,,\x01auth=Bearer tok\xff\x01\x01",  # not UTF-8
        b"\xc3\x28",
        b"",
    ],
)
def test_a_malformed_initial_response_fails(response: bytes) -> None:
    with pytest.raises(AuthenticationFailed, match="OAUTHBEARER client first message"):
        parse_client_initial_response(response)


# The exchange.


def test_the_exchange_is_a_sasl_server(jwks: Jwks) -> None:
    exchange: SaslServer = server(jwks)

    assert exchange.mechanism == "OAUTHBEARER"
    assert not exchange.complete


def test_a_valid_token_authenticates_at_once(keys: Keys, jwks: Jwks) -> None:
    exchange = server(jwks, now=NOW)
    token = sign(claims(exp=int(NOW) + 90), keys.signer)

    assert exchange.evaluate(initial_response(token, extensions="traceId=1\x01")) == b""
    assert exchange.complete
    assert exchange.principal == "User:alice"
    assert exchange.session_lifetime_ms == 90_000
    assert exchange.token.scopes == {"read", "write"}
    assert exchange.extensions == {"traceId": "1"}


def test_the_lifetime_is_read_from_the_clock_and_never_negative(keys: Keys, jwks: Jwks) -> None:
    clock = Clock(NOW)
    exchange = OAuthBearerSaslServer(validator(jwks), clock)
    clock.now = NOW + 10.5
    # Expired by 5 s, accepted within the clock skew: a session that ends at once.
    late = OAuthBearerSaslServer(validator(jwks), Clock(NOW + 605))

    exchange.evaluate(initial_response(sign(claims(), keys.signer)))
    late.evaluate(initial_response(sign(claims(), keys.signer)))

    assert exchange.session_lifetime_ms == 589_500
    assert late.complete
    assert late.session_lifetime_ms == 0


def test_an_authorization_id_must_be_the_principal(keys: Keys, jwks: Jwks) -> None:
    token = sign(claims(), keys.signer)
    matching = server(jwks)
    other = server(jwks)

    matching.evaluate(initial_response(token, authzid="alice"))
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        other.evaluate(initial_response(token, authzid="admin"))

    assert matching.principal == "User:alice"
    assert not other.complete
    with pytest.raises(IllegalSaslState):
        other.evaluate(initial_response(token))


def test_a_refused_token_is_answered_with_the_error_challenge_then_fails(
    keys: Keys, jwks: Jwks
) -> None:
    exchange = server(jwks)
    expired = sign(claims(exp=int(NOW) - 3600, iat=int(NOW) - 7200), keys.signer)

    challenge = exchange.evaluate(initial_response(expired))

    assert json.loads(challenge) == {"status": "invalid_token"}
    assert challenge == b'{"status":"invalid_token"}'
    assert not exchange.complete
    with pytest.raises(AuthenticationFailed, match="token expired"):
        exchange.evaluate(b"\x01")
    assert not exchange.complete
    with pytest.raises(IllegalSaslState):
        exchange.evaluate(b"\x01")


def test_after_the_error_challenge_a_new_initial_response_is_read(keys: Keys, jwks: Jwks) -> None:
    exchange = server(jwks)

    exchange.evaluate(initial_response(sign(claims(), keys.forger)))
    assert exchange.evaluate(initial_response(sign(claims(), keys.signer))) == b""

    assert exchange.principal == "User:alice"


def test_a_dummy_response_without_an_error_before_is_malformed(jwks: Jwks) -> None:
    with pytest.raises(AuthenticationFailed, match="client first message"):
        server(jwks).evaluate(b"\x01")


def test_a_malformed_initial_response_fails_the_exchange_at_once(jwks: Jwks) -> None:
    exchange = server(jwks)

    with pytest.raises(AuthenticationFailed):
        exchange.evaluate(b"n,,\x01\x01")
    with pytest.raises(IllegalSaslState):
        exchange.evaluate(b"\x01")


def test_a_message_after_completion_is_an_illegal_state(keys: Keys, jwks: Jwks) -> None:
    exchange = server(jwks)
    token = initial_response(sign(claims(), keys.signer))
    exchange.evaluate(token)

    with pytest.raises(IllegalSaslState):
        exchange.evaluate(token)
    assert exchange.complete


def test_the_outcome_is_unknown_before_completion(keys: Keys, jwks: Jwks) -> None:
    exchange = server(jwks)
    exchange.evaluate(initial_response(sign(claims(), keys.forger)))

    for outcome in ("principal", "session_lifetime_ms", "token", "extensions"):
        with pytest.raises(IllegalSaslState):
            getattr(exchange, outcome)
