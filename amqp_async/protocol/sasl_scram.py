"""SCRAM-SHA-1, SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), client and server side, Sans-IO.

SCRAM proves knowledge of the password without sending it, and the server proves in turn that it holds the
user's credentials (mutual authentication). The exchange, in AMQP frames (§5.3.3)::

    sasl-init      client-first  "n,,n=user,r=<client nonce>"
    sasl-challenge server-first  "r=<client nonce + server nonce>,s=<salt>,i=<iterations>"
    sasl-response  client-final  "c=biws,r=<nonce>,p=<client proof>"
    sasl-outcome   ok, additional-data: server-final "v=<server signature>"

Channel binding is not supported: the client sends the gs2 header "n,," and the server never offers the -PLUS
variants. A server that sends the server-final message in a challenge instead of the outcome also works.

User names and passwords are prepared with SASLprep (RFC 4013), :func:`saslprep`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from collections.abc import Mapping

from amqp_async.protocol.sasl_mechanisms import (
    ClientMechanism,
    CredentialStore,
    SaslMechanismError,
    ScramCredentials,
    ServerMechanism,
)

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "SCRAM_HASHES",
    "InMemoryCredentialStore",
    "ScramClient",
    "ScramServer",
    "derive_scram_credentials",
    "saslprep",
]

#: Mechanism name -> hashlib name.
SCRAM_HASHES: Mapping[str, str] = {
    "SCRAM-SHA-1": "sha1",
    "SCRAM-SHA-256": "sha256",
    "SCRAM-SHA-512": "sha512",
}

#: Iteration count a server uses for new credentials: RFC 7677 §4 asks for at least 4096.
DEFAULT_ITERATIONS = 4096

#: The client refuses larger iteration counts: each iteration costs one HMAC, so a hostile server could
#: otherwise make the client spin for minutes (1,000,000 rounds of SHA-512 take about a second here).
MAX_ITERATIONS = 1_000_000

# Salts for unknown users derive from this key, so that asking twice for the same unknown user gives the same
# salt, as it would for a real one (RFC 5802 §9: do not reveal whether a user exists).
_FAKE_SALT_KEY = secrets.token_bytes(32)


# --- SASLprep (RFC 4013, a profile of stringprep, RFC 3454) -------------------------------------------------

_PROHIBITED = (
    stringprep.in_table_c12,  # non-ASCII space characters
    stringprep.in_table_c21_c22,  # ASCII and non-ASCII control characters
    stringprep.in_table_c3,  # private use
    stringprep.in_table_c4,  # non-character code points
    stringprep.in_table_c5,  # surrogate codes
    stringprep.in_table_c6,  # inappropriate for plain text
    stringprep.in_table_c7,  # inappropriate for canonical representation
    stringprep.in_table_c8,  # change display properties or deprecated
    stringprep.in_table_c9,  # tagging characters
)


def saslprep(text: str, *, allow_unassigned: bool = True) -> str:
    """Prepare a user name or password with SASLprep (RFC 4013).

    Args:
        text: the string to prepare.
        allow_unassigned: True for "queries" (what a user typed, RFC 3454 §7), False for "stored strings"
            (what a server keeps), which must not contain code points unassigned in Unicode 3.2.

    Returns:
        The prepared string (possibly empty; callers decide whether empty is acceptable).

    Raises:
        SaslMechanismError: the string contains a prohibited character or breaks the bidirectional rules.
    """
    if text.isascii() and text.isprintable():
        return text  # printable ASCII is unchanged by every step; skip the table lookups
    # §2.1: non-ASCII spaces map to SPACE; "commonly mapped to nothing" characters (B.1) are removed.
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in text if not stringprep.in_table_b1(c))
    # §2.2: stringprep is defined over Unicode 3.2, so normalise with that version's tables.
    prepared = unicodedata.ucd_3_2_0.normalize("NFKC", mapped)
    for c in prepared:
        if any(table(c) for table in _PROHIBITED):
            raise SaslMechanismError(f"SASLprep: prohibited character U+{ord(c):04X}")
        if not allow_unassigned and stringprep.in_table_a1(c):
            raise SaslMechanismError(f"SASLprep: unassigned code point U+{ord(c):04X}")
    # §2.4 / RFC 3454 §6: right-to-left text has no left-to-right characters and starts and ends RTL.
    if any(stringprep.in_table_d1(c) for c in prepared):
        if any(stringprep.in_table_d2(c) for c in prepared):
            raise SaslMechanismError("SASLprep: mixes right-to-left and left-to-right characters")
        if not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1])):
            raise SaslMechanismError("SASLprep: right-to-left text must start and end with a right-to-left character")
    return prepared


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SaslMechanismError(f"SCRAM: {what} is not valid base64") from None


def _hmac(key: bytes, message: bytes, hash_name: str) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _salted_keys(password: str, salt: bytes, iterations: int, hash_name: str) -> tuple[bytes, bytes]:
    """ClientKey and ServerKey from a SASLprep'ed password (RFC 5802 §3)."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    return _hmac(salted, b"Client Key", hash_name), _hmac(salted, b"Server Key", hash_name)


def derive_scram_credentials(
    password: str, hash_name: str, *, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredentials:
    """The credentials a server stores for one user and hash, from the user's password.

    Args:
        password: the password; prepared with SASLprep as a stored string.
        hash_name: "sha1", "sha256" or "sha512".
        salt: the salt; by default 16 random bytes.
        iterations: the PBKDF2 iteration count.

    Raises:
        SaslMechanismError: the password is not valid under SASLprep.
    """
    salt = secrets.token_bytes(16) if salt is None else salt
    client_key, server_key = _salted_keys(saslprep(password, allow_unassigned=False), salt, iterations, hash_name)
    return ScramCredentials(salt, iterations, hashlib.new(hash_name, client_key).digest(), server_key)


def _parse(message: bytes | str, what: str) -> list[tuple[str, str]]:
    """Split ``a=x,b=y`` into ordered attribute pairs; any other shape is malformed."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslMechanismError(f"SCRAM: {what} is not UTF-8") from None
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not (part[0].isascii() and part[0].isalpha()):
            raise SaslMechanismError(f"SCRAM: malformed {what}: {message[:100]!r}")
        pairs.append((part[0], part[2:]))
    return pairs


def _expect(pairs: list[tuple[str, str]], index: int, key: str, what: str) -> str:
    if index >= len(pairs) or pairs[index][0] != key:
        raise SaslMechanismError(f"SCRAM: {what} lacks its '{key}=' attribute")
    return pairs[index][1]


def _check_nonce(nonce: str, what: str) -> str:
    # RFC 5802 §7: printable = %x21-2B / %x2D-7E (visible ASCII without ',').
    if not nonce or any(not ("\x21" <= c <= "\x7e") or c == "," for c in nonce):
        raise SaslMechanismError(f"SCRAM: {what} is empty or has characters outside printable ASCII")
    return nonce


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")  # RFC 5802 §5.1, '=' first so it is not escaped twice


def _unescape(name: str) -> str:
    rest = name.replace("=2C", "").replace("=3D", "")
    if "=" in rest:  # RFC 5802 §5.1: any other '=' sequence is malformed
        raise SaslMechanismError("SCRAM: malformed user name escaping")
    return name.replace("=2C", ",").replace("=3D", "=")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


class ScramClient(ClientMechanism):
    """The client side of SCRAM-SHA-1, -256 or -512, without channel binding.

    Args:
        mechanism: "SCRAM-SHA-1", "SCRAM-SHA-256" or "SCRAM-SHA-512".
        user: the user name (SASLprep'ed and escaped here).
        password: the password (SASLprep'ed here).
        authzid: the identity to act as, if different from ``user``.
        nonce: the client nonce; random by default. Only tests should pass one.
        max_iterations: the largest iteration count accepted from the server.

    Raises:
        SaslMechanismError: unknown mechanism, or a user name or password that SASLprep rejects or empties.
    """

    def __init__(
        self,
        mechanism: str,
        user: str,
        password: str,
        *,
        authzid: str | None = None,
        nonce: str | None = None,
        max_iterations: int = MAX_ITERATIONS,
    ) -> None:
        if mechanism not in SCRAM_HASHES:
            raise SaslMechanismError(f"unknown SCRAM mechanism {mechanism!r}")
        self.name = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        prepared_user = saslprep(user)
        self._password = saslprep(password)
        if not prepared_user or not self._password:
            raise SaslMechanismError("SCRAM needs a non-empty user name and password")  # RFC 5802 §5.1
        self._nonce = _check_nonce(secrets.token_urlsafe(24) if nonce is None else nonce, "client nonce")
        self._max_iterations = max_iterations
        self._gs2_header = "n," + (f"a={_escape(saslprep(authzid))}" if authzid else "") + ","
        self._client_first_bare = f"n={_escape(prepared_user)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = "start"  # start -> first-sent -> final-sent -> verified

    def initial_response(self) -> bytes | None:
        """The client-first message."""
        if self._state == "start":
            self._state = "first-sent"
        return (self._gs2_header + self._client_first_bare).encode("utf-8")

    def respond(self, challenge: bytes) -> bytes:
        """The client-final message for the server-first message (or ``b""`` after a server-final one).

        Raises:
            SaslMechanismError: the challenge is malformed, its nonce does not extend ours, its iteration
                count is out of range, or it is a server-final message with a wrong signature or an error.
        """
        if self._state == "final-sent":
            self._verify_final(challenge)  # some servers send server-final as a challenge, then the outcome
            return b""
        if self._state != "first-sent":
            raise SaslMechanismError(f"{self.name}: unexpected challenge")
        pairs = _parse(challenge, "server-first message")
        if pairs[0][0] == "m":  # RFC 5802 §5.1: a mandatory extension we do not know; we must fail
            raise SaslMechanismError(f"{self.name}: server requires an unsupported extension")
        if pairs[0][0] == "e":
            raise SaslMechanismError(f"{self.name}: server error {pairs[0][1]!r}")
        nonce = _check_nonce(_expect(pairs, 0, "r", "server-first message"), "server nonce")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslMechanismError(f"{self.name}: server nonce does not extend the client nonce")
        salt = _unb64(_expect(pairs, 1, "s", "server-first message"), "salt")
        if not salt:
            raise SaslMechanismError(f"{self.name}: empty salt")
        count = _expect(pairs, 2, "i", "server-first message")
        if not (count.isascii() and count.isdigit()) or len(count) > 10:
            raise SaslMechanismError(f"{self.name}: malformed iteration count {count[:20]!r}")
        iterations = int(count)
        if not 1 <= iterations <= self._max_iterations:
            raise SaslMechanismError(f"{self.name}: iteration count {iterations} outside 1..{self._max_iterations}")
        without_proof = f"c={_b64(self._gs2_header.encode('utf-8'))},r={nonce}"
        server_first = challenge.decode("utf-8")
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key, server_key = _salted_keys(self._password, salt, iterations, self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        proof = _xor(client_key, _hmac(stored_key, auth_message, self._hash))
        self._server_signature = _hmac(server_key, auth_message, self._hash)
        self._state = "final-sent"
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def verify_outcome(self, additional_data: bytes | None) -> None:
        """Verify the server-final message carried in the ``ok`` outcome.

        Raises:
            SaslMechanismError: no server signature arrived (the server did not prove it knows the
                credentials), the signature is wrong, or the exchange had not reached its final step.
        """
        if self._state == "verified":
            return
        if self._state != "final-sent":
            raise SaslMechanismError(f"{self.name}: the server reported success before the exchange finished")
        if not additional_data:
            raise SaslMechanismError(f"{self.name}: the server sent no signature, so it did not authenticate itself")
        self._verify_final(additional_data)

    def _verify_final(self, message: bytes) -> None:
        pairs = _parse(message, "server-final message")
        if pairs[0][0] == "e":
            raise SaslMechanismError(f"{self.name}: server error {pairs[0][1]!r}")
        signature = _unb64(_expect(pairs, 0, "v", "server-final message"), "server signature")
        assert self._server_signature is not None  # set when entering "final-sent"
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslMechanismError(f"{self.name}: wrong server signature: the server does not know the password")
        self._state = "verified"


class ScramServer(ServerMechanism):
    """The server side of SCRAM-SHA-1, -256 or -512, without channel binding.

    Unknown users get plausible fake credentials and fail only at the end, like a wrong password, so a client
    cannot probe which users exist. Authorization as another identity (a gs2 ``a=`` different from the user)
    is refused. On success :attr:`additional_data` holds the server-final message for the ``sasl-outcome``.

    Args:
        mechanism: "SCRAM-SHA-1", "SCRAM-SHA-256" or "SCRAM-SHA-512".
        store: where credentials are looked up.
        nonce: the server's part of the nonce; random by default. Only tests should pass one.
    """

    def __init__(self, mechanism: str, store: CredentialStore, *, nonce: str | None = None) -> None:
        super().__init__()
        if mechanism not in SCRAM_HASHES:
            raise SaslMechanismError(f"unknown SCRAM mechanism {mechanism!r}")
        self.name = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._store = store
        self._server_nonce = _check_nonce(secrets.token_urlsafe(18) if nonce is None else nonce, "server nonce")
        self._expecting = "client-first"
        self._user = ""
        self._known = False
        self._credentials: ScramCredentials | None = None
        self._gs2_header = ""
        self._nonce = ""
        self._messages = ""  # client-first-bare "," server-first: the start of AuthMessage

    def _start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]:
        if not initial_response:
            return b"", False  # RFC 4422 §5: an empty challenge asks for the client-first message
        return self._step(initial_response)

    def _step(self, response: bytes | None) -> tuple[bytes | None, bool]:
        if self._expecting == "client-first":
            return self._client_first(response or b""), False
        return self._client_final(response or b"")

    def _client_first(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslMechanismError("SCRAM: client-first message is not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise SaslMechanismError("SCRAM: malformed client-first message")
        cb_flag, authzid_part, bare = parts
        if cb_flag.startswith("p="):
            raise SaslMechanismError("SCRAM: channel binding is not supported")
        if cb_flag not in ("n", "y"):  # "y": client could bind but thinks we cannot, which is true
            raise SaslMechanismError("SCRAM: malformed gs2 header")
        if authzid_part and not authzid_part.startswith("a="):
            raise SaslMechanismError("SCRAM: malformed gs2 header")
        pairs = _parse(bare, "client-first message")
        if pairs[0][0] == "m":
            raise SaslMechanismError("SCRAM: client requires an unsupported extension")
        user = saslprep(_unescape(_expect(pairs, 0, "n", "client-first message")))
        client_nonce = _check_nonce(_expect(pairs, 1, "r", "client-first message"), "client nonce")
        if not user:
            raise SaslMechanismError("SCRAM: empty user name")
        if authzid_part and saslprep(_unescape(authzid_part[2:])) != user:
            raise SaslMechanismError(f"SCRAM: {user!r} may not act as another identity")
        credentials = self._store.scram_credentials(user, self._hash)
        self._known = credentials is not None
        if credentials is None:
            salt = _hmac(_FAKE_SALT_KEY, f"{self._hash}\0{user}".encode(), "sha256")[:16]
            size = hashlib.new(self._hash).digest_size
            credentials = ScramCredentials(salt, DEFAULT_ITERATIONS, secrets.token_bytes(size), b"")
        self._user, self._credentials, self._gs2_header = user, credentials, f"{cb_flag},{authzid_part},"
        self._nonce = client_nonce + self._server_nonce
        server_first = f"r={self._nonce},s={_b64(credentials.salt)},i={credentials.iterations}"
        self._messages = f"{bare},{server_first}"
        self._expecting = "client-final"
        return server_first.encode("utf-8")

    def _client_final(self, message: bytes) -> tuple[bytes | None, bool]:
        pairs = _parse(message, "client-final message")
        binding = _unb64(_expect(pairs, 0, "c", "client-final message"), "channel binding")
        if binding != self._gs2_header.encode("utf-8"):
            raise SaslMechanismError("SCRAM: channel binding data does not match the gs2 header")
        if _expect(pairs, 1, "r", "client-final message") != self._nonce:
            raise SaslMechanismError("SCRAM: wrong nonce in client-final message")
        proof = _unb64(_expect(pairs, len(pairs) - 1, "p", "client-final message"), "client proof")
        credentials = self._credentials
        assert credentials is not None  # set with the client-first message
        if len(proof) != len(credentials.stored_key):
            raise SaslMechanismError("SCRAM: client proof has the wrong length")
        without_proof = message.decode("utf-8").rsplit(",p=", 1)[0]
        auth_message = f"{self._messages},{without_proof}".encode()
        client_key = _xor(proof, _hmac(credentials.stored_key, auth_message, self._hash))
        matches = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credentials.stored_key)
        if not (matches and self._known):
            raise SaslMechanismError(f"SCRAM: wrong password or unknown user {self._user!r}")
        signature = _hmac(credentials.server_key, auth_message, self._hash)
        return self._succeed(self._user, f"v={_b64(signature)}".encode("ascii"))


class InMemoryCredentialStore:
    """A :class:`~.sasl_mechanisms.CredentialStore` over a ``user -> password`` mapping (tests, the broker).

    SCRAM credentials are derived once per user and hash, with a random salt, and cached.

    Args:
        users: user names and passwords (both prepared with SASLprep as stored strings).
        iterations: the PBKDF2 iteration count for SCRAM credentials.

    Raises:
        SaslMechanismError: a user name or password is not valid under SASLprep.
    """

    def __init__(self, users: Mapping[str, str], *, iterations: int = DEFAULT_ITERATIONS) -> None:
        self._passwords = {
            saslprep(u, allow_unassigned=False): saslprep(p, allow_unassigned=False) for u, p in users.items()
        }
        self._iterations = iterations
        self._scram: dict[tuple[str, str], ScramCredentials] = {}

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s password, compared after SASLprep and in constant time."""
        try:
            user, password = saslprep(user), saslprep(password)
        except SaslMechanismError:
            return False
        expected = self._passwords.get(user)
        # Compare even for unknown users so that timing does not tell them apart.
        same = hmac.compare_digest((expected or "\0").encode("utf-8"), password.encode("utf-8"))
        return same and expected is not None

    def scram_credentials(self, user: str, hash_name: str) -> ScramCredentials | None:
        """The user's SCRAM credentials for ``hash_name``, derived on first use; ``None`` if unknown."""
        password = self._passwords.get(user)
        if password is None:
            return None
        key = (user, hash_name)
        if key not in self._scram:
            self._scram[key] = derive_scram_credentials(password, hash_name, iterations=self._iterations)
        return self._scram[key]
