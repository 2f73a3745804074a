"""SASL mechanisms for the AMQP 1.0 SASL layer (spec §5.3), client and server side, Sans-IO.

AMQP only carries SASL: the ``sasl-mechanisms``, ``sasl-init``, ``sasl-challenge``, ``sasl-response`` and
``sasl-outcome`` frames (§5.3.3) move opaque bytes that the mechanisms themselves define in their RFCs. This
module holds those mechanisms and nothing else: it knows no frames, no sockets and no clocks. The SASL state
machine in the engine drives them:

* client: pick one with :func:`select_client_mechanism` from the server's ``sasl-server-mechanisms``; send
  :meth:`ClientMechanism.initial_response` in ``sasl-init``; answer each ``sasl-challenge`` with
  :meth:`ClientMechanism.respond`; on a ``sasl-outcome`` with code ``ok`` call
  :meth:`ClientMechanism.verify_outcome` with its ``additional-data`` (SCRAM checks the server's proof there);
  on any other code raise :func:`outcome_error`.
* server: build one per ``sasl-init`` with :func:`server_mechanism`; :meth:`ServerMechanism.start` takes the
  initial response, :meth:`ServerMechanism.step` each ``sasl-response``; each returns ``(challenge, done)``.
  When done, send ``sasl-outcome`` with :attr:`ServerMechanism.outcome` and
  :attr:`ServerMechanism.additional_data`.

Mechanisms: ANONYMOUS (RFC 4505), PLAIN (RFC 4616), EXTERNAL (RFC 4422 appendix A), XOAUTH2 (Google/Microsoft
bearer-token format), and SCRAM-SHA-1/-256/-512 (RFC 5802, RFC 7677) in :mod:`.sasl_scram`, with
SASLprep (RFC 4013).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from amqp_async.errors import AMQPError

__all__ = [
    "PREFERENCE_ORDER",
    "SERVER_MECHANISM_NAMES",
    "AnonymousClient",
    "AnonymousServer",
    "ClientMechanism",
    "CredentialStore",
    "ExternalClient",
    "ExternalServer",
    "PlainClient",
    "PlainServer",
    "SaslCode",
    "SaslMechanismError",
    "ScramCredentials",
    "ServerMechanism",
    "XOAuth2Client",
    "outcome_error",
    "select_client_mechanism",
    "server_mechanism",
]


class SaslCode(enum.IntEnum):
    """The ``sasl-code`` of a ``sasl-outcome`` frame (§5.3.3.6)."""

    OK = 0  #: Connection authentication succeeded.
    AUTH = 1  #: Connection authentication failed due to an unspecified problem with the supplied credentials.
    SYS = 2  #: Connection authentication failed due to a system error.
    SYS_PERM = 3  #: Connection authentication failed due to a system error that is unlikely to be corrected.
    SYS_TEMP = 4  #: Connection authentication failed due to a transient system error.

    @property
    def description(self) -> str:
        """A sentence for users that says what this outcome means and whether retrying can help."""
        return _CODE_TEXT[self]


_CODE_TEXT = {
    SaslCode.OK: "authentication succeeded",
    SaslCode.AUTH: "authentication failed: the credentials were refused (check user name, password or token)",
    SaslCode.SYS: "authentication failed because of a system error on the server",
    SaslCode.SYS_PERM: "authentication failed because of a permanent system error ; do not retry",
    SaslCode.SYS_TEMP: "authentication failed because of a temporary system error ; retry later",
}


class SaslMechanismError(AMQPError):
    """SASL failed: no suitable mechanism, a refused outcome, or a peer that broke a mechanism's rules.

    Its condition is ``amqp:unauthorized-access``.

    Attributes:
        sasl_code: the ``sasl-code`` (§5.3.3.6) that goes with the failure: the one the server sent, or the
            one a server should send; ``None`` for failures found locally before any outcome.
    """

    default_condition = "amqp:unauthorized-access"

    def __init__(self, description: str, *, sasl_code: int | None = None, condition: str | None = None) -> None:
        super().__init__(description, condition=condition)
        self.sasl_code = sasl_code

    @property
    def temporary(self) -> bool:
        """True when the server said the failure is transient (``sys-temp``), so reconnecting may succeed."""
        return self.sasl_code == SaslCode.SYS_TEMP


def outcome_error(code: int, additional_data: bytes | None = None) -> SaslMechanismError:
    """The error to raise for a ``sasl-outcome`` whose code is not ``ok``.

    Args:
        code: the received ``sasl-code``; codes the spec does not define are reported as such.
        additional_data: the outcome's ``additional-data``, quoted in the message when it is short text.
    """
    try:
        text = SaslCode(code).description
    except ValueError:
        text = f"authentication failed with an undefined sasl-code {code}"
    if additional_data:
        detail = additional_data[:200].decode("utf-8", "replace")
        if detail.isprintable():
            text = f"{text} (server said: {detail})"
    return SaslMechanismError(text, sasl_code=code)


# --- Interfaces ---------------------------------------------------------------------------------------------


class ClientMechanism(abc.ABC):
    """One client-side SASL exchange. Instances are single-use.

    Attributes:
        name: the mechanism's name as offered in ``sasl-server-mechanisms`` (an AMQP symbol).
        sends_secret_in_clear: True when the initial response carries a reusable secret (a password or bearer
            token) in readable form; such mechanisms are refused on an unencrypted transport unless the user
            allows insecure mechanisms.
    """

    name: str
    sends_secret_in_clear: bool = False

    @abc.abstractmethod
    def initial_response(self) -> bytes | None:
        """The ``initial-response`` for ``sasl-init``; ``None`` to send none."""

    def respond(self, challenge: bytes) -> bytes:
        """The ``sasl-response`` to a ``sasl-challenge``.

        Raises:
            SaslMechanismError: the challenge is malformed or unexpected at this point of the exchange.
        """
        raise SaslMechanismError(f"{self.name}: the server sent a challenge, which this mechanism does not expect")

    def verify_outcome(self, additional_data: bytes | None) -> None:
        """Check a successful (``ok``) ``sasl-outcome`` and its ``additional-data``.

        Mechanisms with mutual authentication (SCRAM) verify the server's proof here.

        Raises:
            SaslMechanismError: the server did not prove its identity, or the exchange had not finished.
        """
        return None


class ServerMechanism(abc.ABC):
    """One server-side SASL exchange. Instances are single-use.

    :meth:`start` and :meth:`step` return ``(challenge, done)``. While not done, send ``challenge`` in a
    ``sasl-challenge`` frame and feed the peer's ``sasl-response`` to :meth:`step`. Once done, send a
    ``sasl-outcome`` with :attr:`outcome` and :attr:`additional_data`. A peer that breaks the mechanism's
    rules ends the exchange with outcome ``auth``; it never raises.

    Attributes:
        name: the mechanism's name.
        failure_reason: why authentication failed, for the server's log only (never send it to the client,
            as it may say whether the user exists).
        authorization: the identity the client asked to act as (PLAIN's and EXTERNAL's authzid), or None.
        authorize: decides whether an authenticated user may act as another identity (``authorize(user, authzid)``);
            None (the default) refuses any authzid but the user's own.
    """

    name: str

    def __init__(self) -> None:
        self._started = False
        self._outcome: SaslCode | None = None
        self._identity: str | None = None
        self._additional_data: bytes | None = None
        self.failure_reason: str | None = None
        self.authorization: str | None = None
        self.authorize: Callable[[str, str], bool] | None = None

    def _check_authorization(self, user: str, authzid: str) -> None:
        """Keep the authzid asked for; refuse it unless it is the user's own or :attr:`authorize` allows it."""
        if not authzid:
            return
        self.authorization = authzid
        if authzid != user and not (self.authorize is not None and self.authorize(user, authzid)):
            raise SaslMechanismError(f"{self.name}: {user!r} may not act as {authzid!r}")

    @property
    def done(self) -> bool:
        """True once the outcome is decided."""
        return self._outcome is not None

    @property
    def outcome(self) -> SaslCode | None:
        """The ``sasl-code`` to send, or ``None`` while the exchange continues."""
        return self._outcome

    @property
    def identity(self) -> str | None:
        """The authenticated user name once the outcome is ``ok``, else ``None``."""
        return self._identity if self._outcome == SaslCode.OK else None

    @property
    def additional_data(self) -> bytes | None:
        """The ``additional-data`` for the ``sasl-outcome`` (SCRAM's server-final message), or ``None``."""
        return self._additional_data

    def start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]:
        """Begin with the ``initial-response`` of ``sasl-init`` (``None`` when absent).

        Raises:
            SaslMechanismError: called twice (a local misuse, not a peer's fault).
        """
        if self._started:
            raise SaslMechanismError(f"{self.name}: start() called twice")
        self._started = True
        return self._guard(self._start, initial_response)

    def step(self, response: bytes) -> tuple[bytes | None, bool]:
        """Continue with the bytes of a ``sasl-response``.

        Raises:
            SaslMechanismError: called before :meth:`start` or after the outcome was decided (a local misuse).
        """
        if not self._started or self.done:
            raise SaslMechanismError(f"{self.name}: step() called outside a running exchange")
        return self._guard(self._step, response)

    def _guard(
        self, fn: Callable[[bytes | None], tuple[bytes | None, bool]], data: bytes | None
    ) -> tuple[bytes | None, bool]:
        try:
            return fn(data)
        except SaslMechanismError as exc:
            # Peer mistakes end the exchange with an outcome rather than escaping into the engine; a
            # credential store may pick a code (e.g. sys-temp when its database is down).
            code = SaslCode.AUTH
            if exc.sasl_code in (SaslCode.SYS, SaslCode.SYS_PERM, SaslCode.SYS_TEMP):
                code = SaslCode(exc.sasl_code)
            return self._fail(exc.description, code)

    @abc.abstractmethod
    def _start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]: ...

    def _step(self, response: bytes | None) -> tuple[bytes | None, bool]:
        raise SaslMechanismError(f"{self.name}: unexpected sasl-response")

    def _succeed(self, identity: str, additional_data: bytes | None = None) -> tuple[bytes | None, bool]:
        self._outcome, self._identity, self._additional_data = SaslCode.OK, identity, additional_data
        return None, True

    def _fail(self, reason: str, code: SaslCode = SaslCode.AUTH) -> tuple[bytes | None, bool]:
        self._outcome, self._identity, self.failure_reason = code, None, reason
        return None, True


class ScramCredentials(NamedTuple):
    """What a server stores for one SCRAM user and hash (RFC 5802 §3): never the password itself."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class CredentialStore(Protocol):
    """Where server mechanisms check credentials; :class:`.sasl_scram.InMemoryCredentialStore` is one.

    Either method may raise :class:`SaslMechanismError` with ``sasl_code=SaslCode.SYS_TEMP`` (or another code)
    when it cannot answer, e.g. because a database is down.
    """

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is right for ``user`` (PLAIN). Compare in constant time."""
        ...

    def scram_credentials(self, user: str, hash_name: str) -> ScramCredentials | None:
        """SCRAM credentials of ``user`` for ``hash_name`` ("sha1", "sha256" or "sha512"), or ``None``."""
        ...


# --- Simple client mechanisms -------------------------------------------------------------------------------


def _utf8(value: str, what: str, *, forbid: str = "\0") -> bytes:
    if any(c in value for c in forbid):
        raise SaslMechanismError(f"{what} must not contain {forbid!r}")
    return value.encode("utf-8")


class AnonymousClient(ClientMechanism):
    """ANONYMOUS (RFC 4505): no credentials; the trace (an e-mail address or token) is for server logs.

    Args:
        trace: at most 255 characters; proton sends the user name, or "anonymous" when it has none.
    """

    name = "ANONYMOUS"

    def __init__(self, trace: str = "anonymous") -> None:
        if len(trace) > 255:  # RFC 4505 §2: token = 1*255TCHAR
            raise SaslMechanismError("ANONYMOUS trace information is limited to 255 characters")
        self._trace = _utf8(trace, "ANONYMOUS trace")

    def initial_response(self) -> bytes | None:
        """The trace information."""
        return self._trace


class PlainClient(ClientMechanism):
    """PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd`` in one message; the password travels readable.

    Args:
        user: the authentication identity (non-empty).
        password: the password (non-empty).
        authzid: the identity to act as, if different from ``user``.
    """

    name = "PLAIN"
    sends_secret_in_clear = True

    def __init__(self, user: str, password: str, *, authzid: str | None = None) -> None:
        if not user or not password:
            raise SaslMechanismError("PLAIN needs a non-empty user name and password")  # RFC 4616 §2: 1*SAFE
        self._message = b"\0".join(
            (
                _utf8(authzid or "", "PLAIN authzid"),
                _utf8(user, "PLAIN user"),
                _utf8(password, "PLAIN password"),
            )
        )

    def initial_response(self) -> bytes | None:
        """The whole PLAIN message."""
        return self._message


class ExternalClient(ClientMechanism):
    """EXTERNAL (RFC 4422 appendix A): the identity comes from outside SASL, e.g. a TLS client certificate.

    Args:
        authzid: the identity to act as; ``None`` to act as the identity the external channel established.
    """

    name = "EXTERNAL"

    def __init__(self, authzid: str | None = None) -> None:
        self._message = _utf8(authzid or "", "EXTERNAL authzid")

    def initial_response(self) -> bytes | None:
        """The authorization identity, empty when none was given."""
        return self._message


class XOAuth2Client(ClientMechanism):
    """XOAUTH2: an OAuth 2.0 bearer token in Google's and Microsoft's format (not RFC 7628 OAUTHBEARER).

    A failing server sends a challenge with a JSON error description; the client answers with an empty
    response and the server then sends the failing outcome. The JSON is kept in :attr:`error_details` for
    diagnostics.

    Args:
        user: the account the token belongs to (may be empty for servers that ignore it).
        token: the bearer token.
    """

    name = "XOAUTH2"
    sends_secret_in_clear = True

    def __init__(self, user: str, token: str) -> None:
        if not token:
            raise SaslMechanismError("XOAUTH2 needs a non-empty token")
        user_b = _utf8(user, "XOAUTH2 user", forbid="\0\x01")
        token_b = _utf8(token, "XOAUTH2 token", forbid="\0\x01")
        self._message = b"user=" + user_b + b"\x01auth=Bearer " + token_b + b"\x01\x01"
        self.error_details: bytes | None = None

    def initial_response(self) -> bytes | None:
        """The ``user=...^Aauth=Bearer ...^A^A`` message."""
        return self._message

    def respond(self, challenge: bytes) -> bytes:
        """Record the server's error description and answer with the empty response the format requires."""
        self.error_details = challenge
        return b""


# --- Simple server mechanisms -------------------------------------------------------------------------------


class AnonymousServer(ServerMechanism):
    """ANONYMOUS (RFC 4505): accepts everyone as identity ``anonymous``; keeps the trace in :attr:`trace`."""

    name = "ANONYMOUS"

    def __init__(self) -> None:
        super().__init__()
        self.trace: str | None = None

    def _start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]:
        if initial_response:
            self.trace = initial_response[:1020].decode("utf-8", "replace")  # for logs only; 255 chars * 4 bytes
        return self._succeed("anonymous")


class PlainServer(ServerMechanism):
    """PLAIN (RFC 4616) against a :class:`CredentialStore`; authorization as another identity is refused."""

    name = "PLAIN"

    def __init__(self, store: CredentialStore) -> None:
        super().__init__()
        self._store = store

    def _start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]:
        if initial_response is None:
            return b"", False  # RFC 4422 §5: an empty challenge asks for the initial response
        return self._step(initial_response)

    def _step(self, response: bytes | None) -> tuple[bytes | None, bool]:
        parts = (response or b"").split(b"\0")
        if len(parts) != 3:
            raise SaslMechanismError("PLAIN: malformed message (expected authzid NUL authcid NUL passwd)")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslMechanismError("PLAIN: message is not UTF-8") from None
        if not user or not password:
            raise SaslMechanismError("PLAIN: empty user name or password")
        self._check_authorization(user, authzid)
        if not self._store.check_password(user, password):
            raise SaslMechanismError(f"PLAIN: wrong password or unknown user {user!r}")
        return self._succeed(user)


class ExternalServer(ServerMechanism):
    """EXTERNAL (RFC 4422 appendix A): the identity the channel established (the subject of a TLS client
    certificate); an authzid naming anyone else is refused.

    Args:
        identity: the external identity, or None when the channel established none (the exchange then fails).
    """

    name = "EXTERNAL"

    def __init__(self, identity: str | None) -> None:
        super().__init__()
        self._external = identity

    def _start(self, initial_response: bytes | None) -> tuple[bytes | None, bool]:
        if self._external is None:
            raise SaslMechanismError("EXTERNAL: the channel established no identity (no client certificate)")
        try:
            authzid = (initial_response or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise SaslMechanismError("EXTERNAL: authzid is not UTF-8") from None
        self._check_authorization(self._external, authzid)
        return self._succeed(self._external)


# --- Factories and selection --------------------------------------------------------------------------------

#: Client preference, strongest first. SCRAM never reveals the password and authenticates the server; EXTERNAL
#: relies on the TLS layer; PLAIN and XOAUTH2 hand over a reusable secret; ANONYMOUS proves nothing.
PREFERENCE_ORDER: tuple[str, ...] = (
    "SCRAM-SHA-512",
    "SCRAM-SHA-256",
    "SCRAM-SHA-1",
    "EXTERNAL",
    "PLAIN",
    "XOAUTH2",
    "ANONYMOUS",
)

#: Mechanisms :func:`server_mechanism` can build, strongest first (the order to offer them in).
SERVER_MECHANISM_NAMES: tuple[str, ...] = (
    "SCRAM-SHA-512",
    "SCRAM-SHA-256",
    "SCRAM-SHA-1",
    "PLAIN",
    "ANONYMOUS",
)


def _mechanism_names(names: Sequence[str] | str) -> list[str]:
    # A single string is proton's space-separated form ("PLAIN ANONYMOUS"), not a sequence of letters.
    items = names.split() if isinstance(names, str) else names
    return [str(n).upper() for n in items]


def server_mechanism(name: str, store: CredentialStore) -> ServerMechanism:
    """A new server-side exchange for the mechanism the client chose in ``sasl-init``.

    Args:
        name: one of :data:`SERVER_MECHANISM_NAMES` (case-insensitive).
        store: where credentials are checked (unused by ANONYMOUS).

    Raises:
        SaslMechanismError: the mechanism is not supported; the server should answer with outcome ``auth``.
    """
    # Imported here because sasl_scram builds on this module's interfaces.
    from amqp_async.protocol.sasl_scram import SCRAM_HASHES, ScramServer

    upper = name.upper()
    if upper in SCRAM_HASHES:
        return ScramServer(upper, store)
    if upper == "PLAIN":
        return PlainServer(store)
    if upper == "ANONYMOUS":
        return AnonymousServer()
    raise SaslMechanismError(f"unsupported SASL mechanism {name!r}", sasl_code=SaslCode.AUTH)


def select_client_mechanism(
    offered: Sequence[str] | str,
    allowed: Sequence[str] | str | None,
    *,
    user: str | None = None,
    password: str | None = None,
    authzid: str | None = None,
    token: str | None = None,
    encrypted: bool,
    allow_insecure: bool = False,
) -> ClientMechanism:
    """Choose the strongest usable mechanism the server offered, following :data:`PREFERENCE_ORDER`.

    Rules, per mechanism (each must also be in ``allowed`` when that is given):

    * SCRAM-SHA-*: needs ``user`` and ``password``; safe on any transport.
    * EXTERNAL: when named in ``allowed``, or on an encrypted transport when no ``password`` was given (a
    password
      says the user means password authentication; the TLS layer must hold a client certificate).
    * PLAIN: needs ``user`` and ``password``, and an encrypted transport or ``allow_insecure`` (proton's
      ``allow_insecure_mechs``), because it sends the password in clear.
    * XOAUTH2: needs ``token`` (or, only when ``allowed`` names XOAUTH2, ``password`` used as the token), and
    an
      encrypted transport or ``allow_insecure``.
    * ANONYMOUS: the last resort, as in proton; ``user`` (if any) becomes the trace.

    Args:
        offered: the server's ``sasl-server-mechanisms`` (a list of symbols, or one space-separated string).
        allowed: the user's ``allowed_mechs`` (list or space-separated string), or ``None`` for no
        restriction. user, password, authzid, token: the credentials at hand. encrypted: whether the transport
        below SASL is encrypted (TLS). allow_insecure: allow mechanisms that send a secret in clear over an
        unencrypted transport.

    Raises:
        SaslMechanismError: nothing fits; the message names the offered and allowed lists and why each
            candidate was passed over.
    """
    from amqp_async.protocol.sasl_scram import SCRAM_HASHES, ScramClient  # see server_mechanism

    offered_names = _mechanism_names(offered)
    allowed_names = None if allowed is None else _mechanism_names(allowed)
    has_password = user is not None and password is not None
    secure_enough = encrypted or allow_insecure
    passed_over: list[str] = []
    for name in PREFERENCE_ORDER:
        if name not in offered_names or (allowed_names is not None and name not in allowed_names):
            continue
        explicitly_allowed = allowed_names is not None and name in allowed_names
        if name in SCRAM_HASHES:
            if user is not None and password is not None:
                return ScramClient(name, user, password, authzid=authzid)
            passed_over.append(f"{name} needs a user and password")
        elif name == "EXTERNAL":
            if explicitly_allowed or (encrypted and password is None):
                return ExternalClient(authzid)
            passed_over.append("EXTERNAL needs TLS with a client certificate (or allowed_mechs naming it)")
        elif name == "PLAIN":
            if user is None or password is None:
                passed_over.append("PLAIN needs a user and password")
            elif not secure_enough:
                passed_over.append(
                    "PLAIN sends the password in clear: use TLS, or allow_insecure_mechs=True to permit it"
                )
            else:
                return PlainClient(user, password, authzid=authzid)
        elif name == "XOAUTH2":
            bearer = token if token is not None else (password if explicitly_allowed else None)
            if bearer is None:
                passed_over.append("XOAUTH2 needs a token")
            elif not secure_enough:
                passed_over.append("XOAUTH2 sends the token in clear: use TLS, or allow_insecure_mechs=True")
            else:
                return XOAuth2Client(user or "", bearer)
        else:  # ANONYMOUS
            return AnonymousClient(user or "anonymous")
    offered_text = " ".join(offered_names) or "(none)"
    allowed_text = "(any)" if allowed_names is None else " ".join(allowed_names) or "(none)"
    why = "; ".join(passed_over) if passed_over else "no mechanism in common"
    credentials = "user and password" if has_password else ("token" if token else "no credentials")
    raise SaslMechanismError(
        f"no suitable SASL mechanism: server offered [{offered_text}], allowed [{allowed_text}], "
        f"with {credentials} over an {'encrypted' if encrypted else 'unencrypted'} transport: {why}"
    )
