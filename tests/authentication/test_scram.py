"""SASL/SCRAM's server side: RFC 7677's exchange byte for byte, our own client and scramp's
against it, and every refusal Kafka's ScramSaslServer makes (and the few it does not)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Generator

import pytest
import scramp

from coordinator_server.authentication import scram
from coordinator_server.authentication.sasl_server import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslServer,
    ScramCredential,
)
from coordinator_server.authentication.scram import (
    AUTHORIZATION_ID_MISMATCH,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramSaslServer,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)
from coordinator_server.storage.kafka.sasl import ScramClient

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SALT = b"3kcvfqx0ak9ueh4ovyr0ogbrpj"  # Kafka's tools' shape: 130 random bits in base 36.
SERVER_NONCE = "serverNonce0123456789"

# RFC 7677, section 3.
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def generic_refusal(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class Credentials:
    """A credential store of fixed users: name -> password, for every mechanism."""

    def __init__(self, passwords: dict[str, str], salt: bytes = SALT, iterations: int = 4096):
        self.passwords = passwords
        self.salt = salt
        self.iterations = iterations
        self.asked: list[tuple[str, str]] = []

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        self.asked.append((user, mechanism))
        password = self.passwords.get(user)
        if password is None:
            return None
        return credential_from_password(mechanism, password, self.salt, self.iterations)


USERS = Credentials({"alice": "alice-secret", "a,b=c": "commas", "zoë": "pässwörd"})


def server(
    mechanism: str = "SCRAM-SHA-256",
    credentials: Credentials = USERS,
    nonce: str = SERVER_NONCE,
    unknown_user_secret: bytes | None = None,
) -> ScramSaslServer:
    return ScramSaslServer(
        mechanism, credentials, lambda: nonce, unknown_user_secret=unknown_user_secret
    )


def client_final(
    mechanism: str,
    password: str,
    client_first_bare: bytes,
    server_first: bytes,
    without_proof: bytes,
) -> bytes:
    """A client-final with a right proof over whatever `without_proof` says: computed here
    from RFC 5802 on its own, so that only the server's checks can refuse it."""
    name = HASHES[mechanism]
    fields = dict(field.split("=", 1) for field in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    auth_message = client_first_bare + b"," + server_first + b"," + without_proof
    signature = hmac.new(stored_key, auth_message, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return without_proof + b",p=" + base64.b64encode(proof)


def first_two_steps(
    sasl: ScramSaslServer,
    gs2_header: bytes = b"n,,",
    bare: bytes = b"n=alice,r=clientNonce",
) -> bytes:
    return sasl.evaluate(gs2_header + bare)


def refusal_reason(refused: pytest.ExceptionInfo[AuthenticationFailed]) -> str:
    return str(refused.value.__cause__)


# Kafka's facts and RFC 5802's functions.


def test_kafkas_mechanisms_and_iteration_bounds() -> None:
    assert SCRAM_MECHANISMS == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)


def test_rfc_7677s_salted_password_and_keys_are_scramps() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = salted_password("SCRAM-SHA-256", "pencil", salt, 4096)
    credential = credential_from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    scramps = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info("pencil", 4096, salt)
    assert (credential.salt, credential.stored_key, credential.server_key) == scramps[:3]
    assert credential.iterations == 4096
    assert salted not in (credential.stored_key, credential.server_key)
    assert credential_from_password("SCRAM-SHA-256", "pencil", salt, 4096) == credential


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_credentials_match_scramps_for_both_mechanisms(mechanism: str) -> None:
    credential = credential_from_password(mechanism, "alice-secret", SALT, 8192)
    scramps = scramp.ScramMechanism(mechanism).make_auth_info("alice-secret", 8192, SALT)
    assert (credential.salt, credential.stored_key, credential.server_key) == scramps[:3]
    assert len(credential.stored_key) == hashlib.new(HASHES[mechanism]).digest_size


def test_the_password_is_not_saslprepped_as_kafka_does_not() -> None:
    # SASLprep maps the soft hyphen (U+00AD) to nothing; Kafka hashes the UTF-8 as it is.
    password = "pass\u00adword"
    salted = salted_password("SCRAM-SHA-256", password, SALT, 4096)
    assert salted == hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, 4096)
    assert salted != salted_password("SCRAM-SHA-256", "password", SALT, 4096)


@pytest.mark.parametrize(
    "call",
    [
        lambda: salted_password("SCRAM-SHA-1", "p", SALT, 4096),
        lambda: salted_password("PLAIN", "p", SALT, 4096),
        lambda: salted_password("SCRAM-SHA-256", "p", SALT, 0),
        lambda: credential_from_salted_password("scram-sha-256", SALT, b"x" * 32, 4096),
        lambda: ScramSaslServer("SCRAM-SHA-1", USERS),
        lambda: ScramSaslServer("SCRAM-SHA-256", USERS, unknown_user_secret=b""),
    ],
)
def test_what_is_not_scram_is_a_value_error(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()


# The exchange.


def test_rfc_7677s_exchange_byte_for_byte() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = Credentials({"user": "pencil"}, salt=salt)
    sasl: SaslServer = ScramSaslServer("SCRAM-SHA-256", credentials, lambda: RFC_SERVER_NONCE)
    assert sasl.mechanism == "SCRAM-SHA-256"
    assert sasl.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not sasl.complete
    assert sasl.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert sasl.complete
    assert sasl.principal == "User:user"
    assert sasl.session_lifetime_ms is None
    assert credentials.asked == [("user", "SCRAM-SHA-256")]


def test_our_client_says_rfc_7677s_client_final() -> None:
    steps = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO").steps()
    assert next(steps) == RFC_CLIENT_FIRST
    assert steps.send(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL


def run(steps: Generator[bytes, bytes, None], sasl: ScramSaslServer) -> None:
    """Our client's exchange with the server, to its end."""
    token = next(steps)
    while True:
        challenge = sasl.evaluate(token)
        try:
            token = steps.send(challenge)
        except StopIteration:
            return


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
@pytest.mark.parametrize(
    ("user", "password"), [("alice", "alice-secret"), ("a,b=c", "commas"), ("zoë", "pässwörd")]
)
def test_our_client_authenticates(mechanism: str, user: str, password: str) -> None:
    sasl = ScramSaslServer(mechanism, USERS)
    run(ScramClient(mechanism, user, password).steps(), sasl)
    assert sasl.complete
    assert sasl.principal == f"User:{user}"


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_the_server_nonce_is_drawn_after_the_clients(mechanism: str) -> None:
    sasl = ScramSaslServer(mechanism, USERS)
    server_first = first_two_steps(sasl).decode()
    nonce = server_first.split(",")[0].removeprefix("r=")
    assert nonce.startswith("clientNonce")
    assert len(nonce) > len("clientNonce") + 20
    other = first_two_steps(ScramSaslServer(mechanism, USERS)).decode()
    assert other.split(",")[0] != server_first.split(",")[0]


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scramps_client_authenticates(mechanism: str) -> None:
    client = scramp.ScramClient([mechanism], "alice", "alice-secret")
    sasl = ScramSaslServer(mechanism, USERS)
    client.set_server_first(sasl.evaluate(client.get_client_first().encode()).decode())
    client.set_server_final(sasl.evaluate(client.get_client_final().encode()).decode())
    assert sasl.complete
    assert sasl.principal == "User:alice"


def test_a_credential_of_another_mechanism_does_not_pass() -> None:
    class OnlySha512(Credentials):
        def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
            return super().scram_credential(user, "SCRAM-SHA-512")

    sasl = ScramSaslServer("SCRAM-SHA-256", OnlySha512({"alice": "alice-secret"}))
    with pytest.raises(AuthenticationFailed):
        run(ScramClient("SCRAM-SHA-256", "alice", "alice-secret").steps(), sasl)


# Refusals.


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_a_wrong_password_fails_at_the_proof(mechanism: str) -> None:
    sasl = ScramSaslServer(mechanism, USERS)
    with pytest.raises(AuthenticationFailed) as refused:
        run(ScramClient(mechanism, "alice", "wrong").steps(), sasl)
    assert str(refused.value) == generic_refusal(mechanism)
    assert "wrong proof" in refusal_reason(refused)
    assert not sasl.complete


def test_an_unknown_user_fails_at_once_with_a_wrong_passwords_message() -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed) as unknown:
        sasl.evaluate(b"n,,n=mallory,r=clientNonce")
    assert "no SCRAM-SHA-256 credential" in refusal_reason(unknown)
    with pytest.raises(AuthenticationFailed) as wrong:
        run(ScramClient("SCRAM-SHA-256", "alice", "wrong").steps(), server())
    assert str(unknown.value) == str(wrong.value) == generic_refusal("SCRAM-SHA-256")


def test_with_a_secret_an_unknown_user_gets_a_stable_stand_in_salt_and_fails_at_the_proof() -> None:
    def salt_of(user: bytes, secret: bytes = b"secret-1") -> bytes:
        sasl = server(unknown_user_secret=secret)
        fields = sasl.evaluate(b"n,,n=" + user + b",r=clientNonce").decode().split(",")
        assert fields[2] == f"i={MIN_ITERATIONS}"
        return base64.b64decode(fields[1].removeprefix("s="))

    salt = salt_of(b"mallory")
    assert salt == salt_of(b"mallory")
    assert salt != salt_of(b"mallory", b"secret-2")
    assert salt != salt_of(b"trudy")
    assert 20 <= len(salt) <= 26
    assert set(salt.decode()) <= set("0123456789abcdefghijklmnopqrstuvwxyz")

    sasl = server(unknown_user_secret=b"secret-1")
    with pytest.raises(AuthenticationFailed) as unknown:
        run(ScramClient("SCRAM-SHA-256", "mallory", "anything").steps(), sasl)
    assert "no SCRAM-SHA-256 credential" in refusal_reason(unknown)
    with pytest.raises(AuthenticationFailed) as wrong:
        run(ScramClient("SCRAM-SHA-256", "alice", "wrong").steps(), server())
    assert str(unknown.value) == str(wrong.value)


def test_with_a_secret_an_unknown_user_fails_even_with_a_right_proof(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Were the stand-in's keys ever some password's, its proof would pass: the server must
    # still refuse a user it does not have. The stand-in is made a known password's here.
    def stand_in(mechanism: str, username: str, secret: bytes) -> ScramCredential:
        return credential_from_password(mechanism, "guessed", SALT, MIN_ITERATIONS)

    monkeypatch.setattr(scram, "_stand_in_credential", stand_in)
    sasl = server(unknown_user_secret=b"secret-1")
    server_first = first_two_steps(sasl, bare=b"n=mallory,r=clientNonce")
    final = client_final(
        "SCRAM-SHA-256",
        "guessed",
        b"n=mallory,r=clientNonce",
        server_first,
        b"c=biws,r=clientNonce" + SERVER_NONCE.encode(),
    )
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(final)
    assert "no SCRAM-SHA-256 credential" in refusal_reason(refused)
    assert not sasl.complete


def test_with_a_secret_a_known_user_authenticates_as_before() -> None:
    sasl = server(unknown_user_secret=b"secret-1")
    run(ScramClient("SCRAM-SHA-256", "alice", "alice-secret").steps(), sasl)
    assert sasl.principal == "User:alice"


def test_a_credential_under_kafkas_minimum_iterations_is_refused() -> None:
    sasl = server(credentials=Credentials({"alice": "alice-secret"}, iterations=4095))
    with pytest.raises(AuthenticationFailed) as refused:
        first_two_steps(sasl)
    assert "less than the minimum 4096" in refusal_reason(refused)


def test_a_channel_binding_other_than_the_gs2_header_is_refused() -> None:
    sasl = server()
    server_first = first_two_steps(sasl)
    # The proof is right over the binding claimed: only the binding's check can refuse it.
    without_proof = b"c=" + base64.b64encode(b"y,,") + b",r=clientNonce" + SERVER_NONCE.encode()
    final = client_final(
        "SCRAM-SHA-256", "alice-secret", b"n=alice,r=clientNonce", server_first, without_proof
    )
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(final)
    assert "channel binding" in refusal_reason(refused)
    assert not sasl.complete


@pytest.mark.parametrize(
    ("gs2_header", "binding"),
    [
        (b"n,,", b"biws"),
        (b"y,,", b"eSws"),
        (b"n,a=alice,", base64.b64encode(b"n,a=alice,")),
        (b"y,a=alice,", base64.b64encode(b"y,a=alice,")),
    ],
)
def test_the_channel_binding_is_the_gs2_header_sent(gs2_header: bytes, binding: bytes) -> None:
    sasl = server()
    server_first = first_two_steps(sasl, gs2_header)
    without_proof = b"c=" + binding + b",r=clientNonce" + SERVER_NONCE.encode()
    final = client_final(
        "SCRAM-SHA-256", "alice-secret", b"n=alice,r=clientNonce", server_first, without_proof
    )
    assert sasl.evaluate(final).startswith(b"v=")
    assert sasl.principal == "User:alice"


def test_channel_binding_required_by_the_client_is_refused() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        first_two_steps(server(), b"p=tls-server-end-point,,")
    assert "channel binding" in refusal_reason(refused)


@pytest.mark.parametrize(
    "nonce",
    [
        "clientNonce" + SERVER_NONCE + "x",
        "clientNonce" + SERVER_NONCE[:-1],
        "clientNonce",
        "clientNoncf" + SERVER_NONCE,
        "clientNonce" + SERVER_NONCE.upper(),
    ],
)
def test_a_tampered_nonce_is_refused(nonce: str) -> None:
    sasl = server()
    server_first = first_two_steps(sasl)
    without_proof = b"c=biws,r=" + nonce.encode()
    final = client_final(
        "SCRAM-SHA-256", "alice-secret", b"n=alice,r=clientNonce", server_first, without_proof
    )
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(final)
    assert "nonce" in refusal_reason(refused)


def test_a_replayed_client_final_is_refused() -> None:
    sasl = server()
    server_first = first_two_steps(sasl)
    final = client_final(
        "SCRAM-SHA-256",
        "alice-secret",
        b"n=alice,r=clientNonce",
        server_first,
        b"c=biws,r=clientNonce" + SERVER_NONCE.encode(),
    )
    assert sasl.evaluate(final).startswith(b"v=")
    with pytest.raises(IllegalSaslState):
        sasl.evaluate(final)
    assert sasl.principal == "User:alice"
    # To a new exchange of the same client-first, whose server nonce is new, it is stale.
    again = server(nonce="anotherServerNonce")
    first_two_steps(again)
    with pytest.raises(AuthenticationFailed) as refused:
        again.evaluate(final)
    assert "nonce" in refusal_reason(refused)


def test_any_token_after_a_refusal_is_an_illegal_state() -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed):
        sasl.evaluate(b"n,,n=mallory,r=clientNonce")
    with pytest.raises(IllegalSaslState):
        first_two_steps(sasl)
    with pytest.raises(IllegalSaslState):
        _ = sasl.principal


def test_a_client_first_where_the_final_belongs_fails_the_exchange() -> None:
    sasl = server()
    first_two_steps(sasl)
    with pytest.raises(AuthenticationFailed) as refused:
        first_two_steps(sasl)
    assert "client-final" in refusal_reason(refused)
    with pytest.raises(IllegalSaslState):
        sasl.evaluate(b"c=biws,r=x,p=AAAA")


@pytest.mark.parametrize("value", [b"true", b"TRUE", b"True"])
def test_a_delegation_token_exchange_is_refused(value: bytes) -> None:
    credentials = Credentials({"alice": "alice-secret"})
    with pytest.raises(AuthenticationFailed) as refused:
        first_two_steps(
            server(credentials=credentials), bare=b"n=alice,r=clientNonce,tokenauth=" + value
        )
    assert str(refused.value) == generic_refusal("SCRAM-SHA-256")
    assert "delegation token" in refusal_reason(refused)
    assert credentials.asked == []


def test_other_extensions_are_ignored_but_signed() -> None:
    bare = b"n=alice,r=clientNonce,tokenauth=false,xyz=1=2"
    sasl = server()
    server_first = first_two_steps(sasl, bare=bare)
    without_proof = b"c=biws,r=clientNonce" + SERVER_NONCE.encode()
    assert sasl.evaluate(
        client_final("SCRAM-SHA-256", "alice-secret", bare, server_first, without_proof)
    ).startswith(b"v=")
    # A proof over the bare message without its extensions is not a proof of this one.
    sasl = server()
    server_first = first_two_steps(sasl, bare=bare)
    unsigned = client_final(
        "SCRAM-SHA-256", "alice-secret", b"n=alice,r=clientNonce", server_first, without_proof
    )
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(unsigned)
    assert "wrong proof" in refusal_reason(refused)


def test_client_final_extensions_are_signed_too() -> None:
    sasl = server()
    server_first = first_two_steps(sasl)
    without_proof = b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",x=y"
    final = client_final(
        "SCRAM-SHA-256", "alice-secret", b"n=alice,r=clientNonce", server_first, without_proof
    )
    server_final = sasl.evaluate(final)
    auth_message = b"n=alice,r=clientNonce," + server_first + b"," + without_proof
    server_key = credential_from_password("SCRAM-SHA-256", "alice-secret", SALT, 4096).server_key
    signature = hmac.new(server_key, auth_message, "sha256").digest()
    assert server_final == b"v=" + base64.b64encode(signature)


def test_an_authorization_id_other_than_the_user_is_refused() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        first_two_steps(server(), b"n,a=bob,")
    assert str(refused.value) == AUTHORIZATION_ID_MISMATCH


def test_the_authorization_id_is_decoded_like_the_user_name() -> None:
    sasl = server()
    gs2_header = b"n,a=a=2Cb=3Dc,"
    bare = b"n=a=2Cb=3Dc,r=clientNonce"
    server_first = first_two_steps(sasl, gs2_header, bare)
    without_proof = b"c=" + base64.b64encode(gs2_header) + b",r=clientNonce" + SERVER_NONCE.encode()
    sasl.evaluate(client_final("SCRAM-SHA-256", "commas", bare, server_first, without_proof))
    assert sasl.principal == "User:a,b=c"


@pytest.mark.parametrize(
    ("client_first", "reason"),
    [
        (b"", "no gs2 header"),
        (b"n,", "no gs2 header"),
        (b"n=alice,r=clientNonce", "no gs2 header"),
        (b"x,,n=alice,r=clientNonce", "gs2 flag"),
        (b"n,b=alice,n=alice,r=clientNonce", "not a="),
        (b"n,a=,n=alice,r=clientNonce", "authorization id is empty"),
        (b"n,,r=clientNonce,n=alice", "not n=<user>,r=<nonce>"),
        (b"n,,n=alice", "not n=<user>,r=<nonce>"),
        (b"n,,n=,r=clientNonce", "user name is empty"),
        (b"n,,n=alice=41,r=clientNonce", "user name is empty or has"),
        (b"n,,n=al\x00ice,r=clientNonce", "user name is empty or has"),
        (b"n,,n=alice,r=", "nonce is empty"),
        (b"n,,n=alice,r=client Nonce", "not printable ASCII"),
        ("n,,n=alice,r=clientNoncé".encode(), "not printable ASCII"),
        (b"n,,m=ext,n=alice,r=clientNonce", "mandatory extension"),
        (b"n,,n=alice,r=clientNonce,", "extension"),
        (b"n,,n=alice,r=clientNonce,1=2", "extension"),
        (b"n,,n=alice,r=clientNonce,x=", "extension"),
        (b"n,,n=alice,r=clientNonce,x=1,x=2", "extension 'x' twice"),
        (b"n,,n=\xff,r=clientNonce", "utf-8"),
    ],
)
def test_a_malformed_client_first_is_refused(client_first: bytes, reason: str) -> None:
    credentials = Credentials({"alice": "alice-secret", "alice=41": "x"})
    sasl = server(credentials=credentials)
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(client_first)
    assert str(refused.value) == generic_refusal("SCRAM-SHA-256")
    assert refusal_reason(refused).startswith("client-first: ")
    assert reason in refusal_reason(refused)
    assert credentials.asked == []
    with pytest.raises(IllegalSaslState):
        sasl.evaluate(client_first)


PROOF = base64.b64encode(bytes(32))


@pytest.mark.parametrize(
    ("client_final_message", "reason"),
    [
        (b"", "no proof"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode(), "no proof"),
        (b"r=clientNonce" + SERVER_NONCE.encode() + b",c=biws,p=" + PROOF, "not c=<binding>"),
        (b"c=biws,p=" + PROOF, "not c=<binding>"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",1=2,p=" + PROOF, "extension"),
        (b"c=b!ws,r=clientNonce" + SERVER_NONCE.encode() + b",p=" + PROOF, "not base64"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",p=AAA", "not base64"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",p=" + PROOF + b",x=y", "not base64"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",p=AAAA", "proof is 3 bytes"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b",p=" + PROOF * 2, "proof is"),
        (b"c=biws,r=clientNonce" + SERVER_NONCE.encode() + b"\xff,p=" + PROOF, "utf-8"),
    ],
)
def test_a_malformed_client_final_is_refused(client_final_message: bytes, reason: str) -> None:
    sasl = server()
    first_two_steps(sasl)
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(client_final_message)
    assert str(refused.value) == generic_refusal("SCRAM-SHA-256")
    assert reason in refusal_reason(refused)
    assert not sasl.complete
