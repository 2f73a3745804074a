"""Tests for the SASL mechanisms (amqp_async.protocol.sasl_mechanisms and .sasl_scram).

RFC test vectors pin SCRAM to independent reference values; our client against our server covers every mechanism;
malformed input must give SaslMechanismError on the client and a failed outcome on the server, nothing else.
"""

from __future__ import annotations

import ast
import base64
import random
from pathlib import Path

import pytest

from amqp_async.errors import AMQPError
from amqp_async.protocol import sasl_mechanisms, sasl_scram
from amqp_async.protocol.sasl_mechanisms import (
    AnonymousClient,
    AnonymousServer,
    ClientMechanism,
    ExternalClient,
    PlainClient,
    PlainServer,
    SaslCode,
    SaslMechanismError,
    ScramCredentials,
    ServerMechanism,
    XOAuth2Client,
    outcome_error,
    select_client_mechanism,
    server_mechanism,
)
from amqp_async.protocol.sasl_scram import (
    InMemoryCredentialStore,
    ScramClient,
    ScramServer,
    derive_scram_credentials,
    saslprep,
)

SCRAM_MECHS = ["SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = {"alice": "s3cret", "user": "pencil", "a,b=c": "p\u00e4ss w\u00f6rd"}


@pytest.fixture(scope="module")
def store() -> InMemoryCredentialStore:
    return InMemoryCredentialStore(USERS)


def exchange(client: ClientMechanism, server: ServerMechanism) -> str:
    """Drive both sides as the engine would; returns the server's identity or raises SaslMechanismError."""
    challenge, done = server.start(client.initial_response())
    rounds = 0
    while not done:
        assert challenge is not None
        challenge, done = server.step(client.respond(challenge))
        rounds += 1
        assert rounds < 5
    assert server.outcome is not None
    if server.outcome != SaslCode.OK:
        raise outcome_error(server.outcome, None)
    client.verify_outcome(server.additional_data)
    assert server.identity is not None
    return server.identity


# --- RFC test vectors -----------------------------------------------------------------------------------------


def test_rfc5802_scram_sha1_vector() -> None:
    client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert client.initial_response() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = client.respond(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == (b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    client.verify_outcome(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


def test_rfc7677_scram_sha256_vector() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.respond(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify_outcome(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


class _FixedStore:
    """A store whose SCRAM credentials use a given salt, to reproduce the RFC exchanges on the server side."""

    def __init__(self, salt: bytes) -> None:
        self.salt = salt

    def check_password(self, user: str, password: str) -> bool:
        return False

    def scram_credentials(self, user: str, hash_name: str) -> ScramCredentials | None:
        return derive_scram_credentials("pencil", hash_name, salt=self.salt) if user == "user" else None


@pytest.mark.parametrize(
    ("mech", "client_nonce", "server_nonce", "salt", "client_final", "server_final"),
    [
        (
            "SCRAM-SHA-1",
            "fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            "QSXCR+Q6sek8bf92",
            "p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
            b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
        ),
        (
            "SCRAM-SHA-256",
            "rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            "W22ZaJ0SNY7soEsUEjb6gQ==",
            "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        ),
    ],
)
def test_rfc_vectors_server_side(
    mech: str, client_nonce: str, server_nonce: str, salt: str, client_final: str, server_final: bytes
) -> None:
    server = ScramServer(mech, _FixedStore(base64.b64decode(salt)), nonce=server_nonce)
    challenge, done = server.start(f"n,,n=user,r={client_nonce}".encode())
    nonce = client_nonce + server_nonce
    assert (challenge, done) == (f"r={nonce},s={salt},i=4096".encode(), False)
    assert server.step(f"c=biws,r={nonce},{client_final}".encode()) == (None, True)
    assert server.outcome == SaslCode.OK
    assert server.identity == "user"
    assert server.additional_data == server_final


# --- Our client against our server ----------------------------------------------------------------------------


@pytest.mark.parametrize("mech", SCRAM_MECHS)
@pytest.mark.parametrize("user", sorted(USERS))
def test_scram_round_trip(store: InMemoryCredentialStore, mech: str, user: str) -> None:
    client = ScramClient(mech, user, USERS[user])
    assert client.name == mech
    assert not client.sends_secret_in_clear
    assert exchange(client, server_mechanism(mech, store)) == user


@pytest.mark.parametrize("mech", SCRAM_MECHS)
def test_scram_wrong_password(store: InMemoryCredentialStore, mech: str) -> None:
    server = server_mechanism(mech, store)
    with pytest.raises(SaslMechanismError) as info:
        exchange(ScramClient(mech, "alice", "wrong"), server)
    assert info.value.sasl_code == SaslCode.AUTH
    assert server.identity is None
    assert server.additional_data is None


@pytest.mark.parametrize("mech", SCRAM_MECHS)
def test_scram_unknown_user_does_not_leak(store: InMemoryCredentialStore, mech: str) -> None:
    def server_first(user: str) -> dict[str, str]:
        server = server_mechanism(mech, store)
        challenge, done = server.start(ScramClient(mech, user, "x").initial_response())
        assert not done and challenge is not None
        return dict(part.split("=", 1) for part in challenge.decode().split(","))

    known, unknown, again = server_first("alice"), server_first("mallory"), server_first("mallory")
    assert set(known) == set(unknown) == {"r", "s", "i"}
    assert known["i"] == unknown["i"]
    assert len(base64.b64decode(known["s"])) == len(base64.b64decode(unknown["s"]))
    assert unknown["s"] == again["s"]  # a stable salt, as a real user has
    server = server_mechanism(mech, store)
    with pytest.raises(SaslMechanismError):
        exchange(ScramClient(mech, "mallory", "x"), server)
    assert server.outcome == SaslCode.AUTH  # the same outcome as a wrong password


def test_scram_server_final_in_challenge(store: InMemoryCredentialStore) -> None:
    # Some servers send server-final as a challenge, then an ok outcome without additional data.
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store)
    challenge, _ = server.start(client.initial_response())
    assert challenge is not None
    _, done = server.step(client.respond(challenge))
    assert done and server.outcome == SaslCode.OK and server.additional_data is not None
    assert client.respond(server.additional_data) == b""
    client.verify_outcome(None)


def test_scram_tampered_server_signature(store: InMemoryCredentialStore) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store)
    challenge, _ = server.start(client.initial_response())
    assert challenge is not None
    server.step(client.respond(challenge))
    assert server.additional_data is not None
    signature = bytearray(base64.b64decode(server.additional_data[2:]))
    signature[0] ^= 1
    with pytest.raises(SaslMechanismError, match="server signature"):
        client.verify_outcome(b"v=" + base64.b64encode(bytes(signature)))


def test_scram_outcome_without_signature_is_refused(store: InMemoryCredentialStore) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store)
    challenge, _ = server.start(client.initial_response())
    assert challenge is not None
    server.step(client.respond(challenge))
    with pytest.raises(SaslMechanismError, match="no signature"):
        client.verify_outcome(None)


def test_scram_outcome_before_exchange_finished() -> None:
    client = ScramClient("SCRAM-SHA-1", "alice", "s3cret")
    client.initial_response()
    with pytest.raises(SaslMechanismError, match="before the exchange finished"):
        client.verify_outcome(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


def test_user_name_escaping() -> None:
    client = ScramClient("SCRAM-SHA-1", "a,b=c", "x", nonce="abc")
    assert client.initial_response() == b"n,,n=a=2Cb=3Dc,r=abc"


def test_scram_authzid(store: InMemoryCredentialStore) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret", authzid="alice")
    response = client.initial_response()
    assert response is not None and response.startswith(b"n,a=alice,n=alice,r=")
    assert exchange(client, ScramServer("SCRAM-SHA-256", store)) == "alice"
    other = ScramClient("SCRAM-SHA-256", "alice", "s3cret", authzid="bob")
    with pytest.raises(SaslMechanismError):
        exchange(other, ScramServer("SCRAM-SHA-256", store))


def test_plain_round_trip(store: InMemoryCredentialStore) -> None:
    assert exchange(PlainClient("alice", "s3cret"), server_mechanism("PLAIN", store)) == "alice"
    assert exchange(PlainClient("a,b=c", USERS["a,b=c"]), PlainServer(store)) == "a,b=c"
    assert exchange(PlainClient("alice", "s3cret", authzid="alice"), PlainServer(store)) == "alice"


@pytest.mark.parametrize(
    ("user", "password", "authzid"),
    [("alice", "wrong", None), ("mallory", "s3cret", None), ("alice", "s3cret", "bob")],
)
def test_plain_refused(store: InMemoryCredentialStore, user: str, password: str, authzid: str | None) -> None:
    server = PlainServer(store)
    with pytest.raises(SaslMechanismError) as info:
        exchange(PlainClient(user, password, authzid=authzid), server)
    assert info.value.sasl_code == SaslCode.AUTH
    assert server.failure_reason


def test_plain_server_asks_for_missing_initial_response(store: InMemoryCredentialStore) -> None:
    server = PlainServer(store)
    assert server.start(None) == (b"", False)
    assert server.step(b"\0alice\0s3cret") == (None, True)
    assert server.identity == "alice"


@pytest.mark.parametrize("message", [b"", b"alice\0s3cret", b"\0alice\0s3\0cret", b"\0\0s3cret", b"\0\xff\0x"])
def test_plain_server_malformed(store: InMemoryCredentialStore, message: bytes) -> None:
    server = PlainServer(store)
    assert server.start(message) == (None, True)
    assert server.outcome == SaslCode.AUTH


def test_anonymous_round_trip(store: InMemoryCredentialStore) -> None:
    server = server_mechanism("ANONYMOUS", store)
    assert exchange(AnonymousClient("me@example.com"), server) == "anonymous"
    assert isinstance(server, AnonymousServer) and server.trace == "me@example.com"
    assert AnonymousServer().start(None) == (None, True)


def test_server_misuse_raises(store: InMemoryCredentialStore) -> None:
    server = PlainServer(store)
    with pytest.raises(SaslMechanismError):
        server.step(b"\0alice\0s3cret")
    server.start(b"\0alice\0s3cret")
    with pytest.raises(SaslMechanismError):
        server.start(b"\0alice\0s3cret")
    with pytest.raises(SaslMechanismError):
        server.step(b"\0alice\0s3cret")
    with pytest.raises(SaslMechanismError):
        server_mechanism("GSSAPI", store)


def test_store_error_gives_its_code() -> None:
    class Down:
        def check_password(self, user: str, password: str) -> bool:
            raise SaslMechanismError("database down", sasl_code=SaslCode.SYS_TEMP)

        def scram_credentials(self, user: str, hash_name: str) -> ScramCredentials | None:
            raise SaslMechanismError("database down", sasl_code=SaslCode.SYS_TEMP)

    for server in (PlainServer(Down()), ScramServer("SCRAM-SHA-1", Down())):
        client = PlainClient("a", "b") if server.name == "PLAIN" else ScramClient("SCRAM-SHA-1", "a", "b")
        with pytest.raises(SaslMechanismError) as info:
            exchange(client, server)
        assert info.value.temporary
        assert server.outcome == SaslCode.SYS_TEMP


# --- Malformed server messages: the client raises SaslMechanismError, nothing else ------------------------------

CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
GOOD_FIRST = f"r={CLIENT_NONCE}3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"


@pytest.mark.parametrize(
    "challenge",
    [
        b"",
        b"hello",
        b"\xff\xfe",
        b"s=QSXCR+Q6sek8bf92,i=4096",  # missing r
        f"r={CLIENT_NONCE}xyz,i=4096".encode(),  # missing s
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92".encode(),  # missing i
        f"s=QSXCR+Q6sek8bf92,r={CLIENT_NONCE}xyz,i=4096".encode(),  # wrong order
        b"r=someoneelse,s=QSXCR+Q6sek8bf92,i=4096",  # nonce not prefixed by ours
        f"r={CLIENT_NONCE},s=QSXCR+Q6sek8bf92,i=4096".encode(),  # no server part
        f"r={CLIENT_NONCE}x y,s=QSXCR+Q6sek8bf92,i=4096".encode(),  # unprintable nonce
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=0".encode(),
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=-1".encode(),
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=abc".encode(),
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=\u0664\u0660\u0669\u0666".encode(),  # Arabic digits
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=1000001".encode(),  # above MAX_ITERATIONS
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i={'9' * 5000}".encode(),
        f"r={CLIENT_NONCE}xyz,s=not*base64!,i=4096".encode(),
        f"r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf9,i=4096".encode(),  # bad padding
        f"r={CLIENT_NONCE}xyz,s=\u00e9,i=4096".encode(),
        f"r={CLIENT_NONCE}xyz,s=,i=4096".encode(),  # empty salt
        f"m=ext,r={CLIENT_NONCE}xyz,s=QSXCR+Q6sek8bf92,i=4096".encode(),  # mandatory extension
        b"e=other-error",
        GOOD_FIRST.encode() + b",",  # trailing empty attribute
    ],
)
def test_malformed_server_first(challenge: bytes) -> None:
    client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce=CLIENT_NONCE)
    client.initial_response()
    with pytest.raises(SaslMechanismError):
        client.respond(challenge)


def test_iteration_limit_is_configurable() -> None:
    client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce=CLIENT_NONCE, max_iterations=1000)
    client.initial_response()
    with pytest.raises(SaslMechanismError, match="iteration count 4096"):
        client.respond(GOOD_FIRST.encode())


@pytest.mark.parametrize(
    "final", [b"", b"v=not*base64", b"e=invalid-proof", b"x=1", b"v=", b"\xff", b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ"]
)
def test_malformed_server_final(final: bytes) -> None:
    client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce=CLIENT_NONCE)
    client.initial_response()
    client.respond(GOOD_FIRST.encode())
    with pytest.raises(SaslMechanismError):
        client.verify_outcome(final)


def test_client_fuzz_only_raises_sasl_error() -> None:
    rng = random.Random(5802)
    good = GOOD_FIRST.encode()
    inputs = [good[:i] for i in range(len(good))] + [good[:i] + good[i + 1 :] for i in range(len(good))]
    alphabet = b"rsiemvcp=,+/0123456789abc\x00\xff"
    inputs += [bytes(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(300)]
    for data in inputs:
        client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce=CLIENT_NONCE, max_iterations=64)
        client.initial_response()
        try:
            client.respond(data)
            client.verify_outcome(data)
        except SaslMechanismError:
            pass


def test_unexpected_challenges() -> None:
    for mech in (AnonymousClient(), PlainClient("a", "b"), ExternalClient()):
        with pytest.raises(SaslMechanismError):
            mech.respond(b"x")
        mech.verify_outcome(None)  # no mutual authentication: nothing to check
    client = ScramClient("SCRAM-SHA-1", "user", "pencil")
    with pytest.raises(SaslMechanismError):
        client.respond(GOOD_FIRST.encode())  # before the initial response was sent


# --- Malformed client messages: the server ends with outcome auth, never raises ---------------------------------


@pytest.mark.parametrize(
    "first",
    [
        b"\xff",
        b"n,,",
        b"garbage",
        b"p=tls-unique,,n=alice,r=abc",  # channel binding requested
        b"x,,n=alice,r=abc",
        b"n,b=alice,n=alice,r=abc",
        b"n,,m=ext,n=alice,r=abc",
        b"n,,r=abc,n=alice",
        b"n,,n=al=ice,r=abc",  # bad escaping
        b"n,,n=,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=al\x07ice,r=abc",  # SASLprep-prohibited
        b"n,a=bob,n=alice,r=abc",  # authorization as someone else
    ],
)
def test_server_malformed_client_first(store: InMemoryCredentialStore, first: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", store)
    assert server.start(first) == (None, True)
    assert server.outcome == SaslCode.AUTH
    assert server.failure_reason


def _final_variants() -> list[bytes]:
    return [
        b"",
        b"\xff",
        b"c=biws,p=AAAA",  # missing r
        b"c=eSws,r={nonce},p={proof}",  # gs2 header "y,," differs from the one sent
        b"c=biws,r={nonce}x,p={proof}",  # wrong nonce
        b"c=biws,r={nonce}",  # missing proof
        b"c=biws,r={nonce},p=AAAA",  # proof of the wrong length
        b"c=biws,r={nonce},p=*",
        b"c=not*b64,r={nonce},p={proof}",
        b"r={nonce},c=biws,p={proof}",
    ]


@pytest.mark.parametrize("template", _final_variants())
def test_server_malformed_client_final(store: InMemoryCredentialStore, template: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store)
    challenge, _ = server.start(client.initial_response())
    assert challenge is not None
    good = client.respond(challenge)
    nonce, proof = good.split(b",r=")[1].split(b",p=")
    bad = template.replace(b"{nonce}", nonce).replace(b"{proof}", proof)
    assert server.step(bad) == (None, True)
    assert server.outcome == SaslCode.AUTH


def test_server_without_initial_response_asks_for_it(store: InMemoryCredentialStore) -> None:
    client = ScramClient("SCRAM-SHA-512", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-512", store)
    assert server.start(None) == (b"", False)
    challenge, done = server.step(client.initial_response() or b"")
    assert challenge is not None and not done
    server.step(client.respond(challenge))
    client.verify_outcome(server.additional_data)
    assert server.identity == "alice"


def test_server_fuzz_never_raises(store: InMemoryCredentialStore) -> None:
    rng = random.Random(7677)
    alphabet = b"nacrpy=,+/0123456789abc\x00\xff"
    for _ in range(300):
        server = ScramServer("SCRAM-SHA-1", store)
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        _, done = server.start(data)
        if not done:
            server.step(bytes(rng.choice(alphabet) for _ in range(rng.randrange(40))))
        assert server.done
        plain = PlainServer(store)
        plain.start(data)
        assert plain.outcome == SaslCode.AUTH


# --- Simple client mechanisms ---------------------------------------------------------------------------------


def test_simple_client_messages() -> None:
    assert PlainClient("alice", "s3cret").initial_response() == b"\0alice\0s3cret"
    assert PlainClient("alice", "s3cret", authzid="bob").initial_response() == b"bob\0alice\0s3cret"
    assert PlainClient("alice", "s3cret").sends_secret_in_clear
    assert ExternalClient().initial_response() == b""
    assert ExternalClient("bob").initial_response() == b"bob"
    assert AnonymousClient().initial_response() == b"anonymous"
    assert AnonymousClient("").initial_response() == b""
    xoauth = XOAuth2Client("me@example.com", "ya29.token")
    assert xoauth.initial_response() == b"user=me@example.com\x01auth=Bearer ya29.token\x01\x01"
    assert xoauth.sends_secret_in_clear
    assert xoauth.respond(b'{"status":"401"}') == b""
    assert xoauth.error_details == b'{"status":"401"}'


@pytest.mark.parametrize(
    "build",
    [
        lambda: PlainClient("", "x"),
        lambda: PlainClient("a", ""),
        lambda: PlainClient("a\0b", "x"),
        lambda: XOAuth2Client("a", ""),
        lambda: XOAuth2Client("a", "t\x01"),
        lambda: AnonymousClient("x" * 256),
        lambda: ScramClient("SCRAM-MD5", "a", "b"),
        lambda: ScramClient("SCRAM-SHA-1", "\u00ad", "b"),  # empty after SASLprep
        lambda: ScramClient("SCRAM-SHA-1", "a", "b\u0007"),
        lambda: ScramClient("SCRAM-SHA-1", "a", "b", nonce="has,comma"),
    ],
)
def test_bad_client_arguments(build: object) -> None:
    with pytest.raises(SaslMechanismError):
        build()  # type: ignore[operator]


# --- Selection ------------------------------------------------------------------------------------------------


def test_plain_refused_on_unencrypted_transport() -> None:
    with pytest.raises(SaslMechanismError) as info:
        select_client_mechanism(["PLAIN"], None, user="u", password="p", encrypted=False)
    assert "allow_insecure_mechs" in info.value.description
    assert "PLAIN" in info.value.description
    mech = select_client_mechanism(["PLAIN"], None, user="u", password="p", encrypted=False, allow_insecure=True)
    assert isinstance(mech, PlainClient)
    mech = select_client_mechanism(["PLAIN"], None, user="u", password="p", encrypted=True)
    assert isinstance(mech, PlainClient)


def test_anonymous_without_user() -> None:
    mech = select_client_mechanism(["PLAIN", "ANONYMOUS"], None, encrypted=False)
    assert isinstance(mech, AnonymousClient)
    # As in proton: with a user but PLAIN refused, ANONYMOUS is the last resort and the user name the trace.
    mech = select_client_mechanism(["PLAIN", "ANONYMOUS"], None, user="u", password="p", encrypted=False)
    assert isinstance(mech, AnonymousClient) and mech.initial_response() == b"u"


def test_scram_preferred() -> None:
    offered = ["ANONYMOUS", "PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256", "EXTERNAL"]
    mech = select_client_mechanism(offered, None, user="u", password="p", encrypted=True)
    assert mech.name == "SCRAM-SHA-256"
    mech = select_client_mechanism([*offered, "SCRAM-SHA-512"], None, user="u", password="p", encrypted=False)
    assert mech.name == "SCRAM-SHA-512"


def test_allowed_list_filters() -> None:
    offered = ["SCRAM-SHA-256", "PLAIN", "ANONYMOUS"]
    kwargs = {"user": "u", "password": "p", "encrypted": True}
    assert select_client_mechanism(offered, ["PLAIN"], **kwargs).name == "PLAIN"  # type: ignore[arg-type]
    assert select_client_mechanism(offered, "plain anonymous", **kwargs).name == "PLAIN"  # type: ignore[arg-type]
    assert select_client_mechanism(offered, ["ANONYMOUS"], **kwargs).name == "ANONYMOUS"  # type: ignore[arg-type]


def test_nothing_suitable_names_both_lists() -> None:
    with pytest.raises(SaslMechanismError) as info:
        select_client_mechanism(["GSSAPI", "SCRAM-SHA-1"], ["PLAIN"], user="u", password="p", encrypted=True)
    text = str(info.value)
    assert "GSSAPI SCRAM-SHA-1" in text and "[PLAIN]" in text
    assert info.value.condition == "amqp:unauthorized-access"
    with pytest.raises(SaslMechanismError, match="needs a user and password"):
        select_client_mechanism(["SCRAM-SHA-256"], None, encrypted=True)


def test_external_selection() -> None:
    assert select_client_mechanism(["EXTERNAL", "ANONYMOUS"], None, encrypted=True).name == "EXTERNAL"
    assert select_client_mechanism(["EXTERNAL", "ANONYMOUS"], None, encrypted=False).name == "ANONYMOUS"
    mech = select_client_mechanism(["EXTERNAL", "PLAIN"], None, user="u", password="p", encrypted=True)
    assert mech.name == "PLAIN"  # a password says the user meant password authentication
    mech = select_client_mechanism(["EXTERNAL"], ["EXTERNAL"], authzid="bob", encrypted=False)
    assert mech.name == "EXTERNAL" and mech.initial_response() == b"bob"


def test_xoauth2_selection() -> None:
    mech = select_client_mechanism(["XOAUTH2", "ANONYMOUS"], None, user="u", token="t", encrypted=True)
    assert mech.name == "XOAUTH2" and mech.initial_response() == b"user=u\x01auth=Bearer t\x01\x01"
    with pytest.raises(SaslMechanismError, match="XOAUTH2 sends the token in clear"):
        select_client_mechanism(["XOAUTH2"], None, user="u", token="t", encrypted=False)
    with pytest.raises(SaslMechanismError, match="XOAUTH2 needs a token"):
        select_client_mechanism(["XOAUTH2"], None, user="u", password="p", encrypted=True)
    mech = select_client_mechanism(["XOAUTH2"], ["XOAUTH2"], user="u", password="p", encrypted=True)
    assert mech.initial_response() == b"user=u\x01auth=Bearer p\x01\x01"


# --- SASLprep, codes, errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "prepared"),
    [
        ("I\u00adX", "IX"),  # RFC 4013 §3 examples
        ("user", "user"),
        ("USER", "USER"),
        ("\u00aa", "a"),
        ("\u2168", "IX"),
        ("a\u00a0b", "a b"),  # non-ASCII space maps to SPACE
        ("\u0627\u0628", "\u0627\u0628"),  # right-to-left only is fine
    ],
)
def test_saslprep(text: str, prepared: str) -> None:
    assert saslprep(text) == prepared


@pytest.mark.parametrize("text", ["\u0007", "\u0627\u0031", "a\ue000", "a\u200e", "\u0627a\u0628"])
def test_saslprep_prohibited(text: str) -> None:
    with pytest.raises(SaslMechanismError):
        saslprep(text)


def test_saslprep_unassigned() -> None:
    assert saslprep("a\u0221") == "a\u0221"  # unassigned in Unicode 3.2: fine in a query
    with pytest.raises(SaslMechanismError):
        saslprep("a\u0221", allow_unassigned=False)


def test_sasl_codes_and_errors() -> None:
    assert [int(c) for c in SaslCode] == [0, 1, 2, 3, 4]
    assert "credentials" in SaslCode.AUTH.description
    auth, temp, perm = outcome_error(1), outcome_error(4), outcome_error(3)
    assert isinstance(auth, AMQPError) and auth.condition == "amqp:unauthorized-access"
    assert auth.sasl_code == SaslCode.AUTH and not auth.temporary
    assert temp.temporary and "temporary" in temp.description
    assert "permanent" in perm.description
    assert "undefined sasl-code 9" in outcome_error(9).description
    assert "account locked" in outcome_error(1, b"account locked").description


def test_in_memory_store() -> None:
    store = InMemoryCredentialStore({"\u2168": "pass\u00a0word"}, iterations=4096)
    assert store.check_password("IX", "pass word")
    assert not store.check_password("IX", "password")
    assert not store.check_password("nobody", "pass word")
    assert not store.check_password("IX", "\u0007")
    first = store.scram_credentials("IX", "sha256")
    assert first is not None and first.iterations == 4096 and len(first.salt) == 16
    assert store.scram_credentials("IX", "sha256") is first  # derived once, then cached
    assert store.scram_credentials("nobody", "sha256") is None
    with pytest.raises(SaslMechanismError):
        InMemoryCredentialStore({"u": "bad\u0007"})


# --- Sans-IO rule ---------------------------------------------------------------------------------------------

FORBIDDEN = {"asyncio", "anyio", "trio", "uvloop", "socket", "ssl", "select", "selectors", "threading"}
FORBIDDEN |= {"subprocess", "time"}


@pytest.mark.parametrize("module", [sasl_mechanisms, sasl_scram])
def test_sans_io_imports(module: object) -> None:
    path = Path(str(getattr(module, "__file__", "")))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


# --- EXTERNAL on the server (the identity comes from the TLS layer) --------------------------------------------


def test_external_server_takes_the_channel_identity() -> None:
    from amqp_async.protocol.sasl_mechanisms import ExternalServer, SaslCode

    accepted = ExternalServer("CN=client")
    assert accepted.start(b"") == (None, True)
    assert (accepted.outcome, accepted.identity) == (SaslCode.OK, "CN=client")
    same = ExternalServer("CN=client")
    same.start(b"CN=client")
    assert same.outcome == SaslCode.OK
    for identity, authzid in ((None, b""), ("CN=client", b"CN=admin"), ("CN=client", b"\xff")):
        refused = ExternalServer(identity)
        refused.start(authzid)
        assert (refused.outcome, refused.identity) == (SaslCode.AUTH, None)


def test_sasl_server_offers_external_only_with_an_identity() -> None:
    from amqp_async.protocol import SaslServer

    with pytest.raises(ValueError):
        SaslServer(["EXTERNAL"])  # no way to learn the identity
    identity: list[str | None] = [None]
    server = SaslServer(["EXTERNAL", "ANONYMOUS"], external=lambda: identity[0])
    assert [str(name) for name in server.start()[0].sasl_server_mechanisms] == ["ANONYMOUS"]
    identity[0] = "CN=client"
    server = SaslServer(["EXTERNAL", "ANONYMOUS"], external=lambda: identity[0])
    assert [str(name) for name in server.start()[0].sasl_server_mechanisms] == ["EXTERNAL", "ANONYMOUS"]
