"""The SASL layer (§5.3): the frame exchange that runs before the AMQP protocol header, in both roles.

Client: the server's sasl-mechanisms arrive; we pick a mechanism (from the server's list and the caller's allowed
list, refusing mechanisms that send secrets in clear over an unencrypted transport unless allowed), send
sasl-init, answer challenges, and check the outcome. Server: we send sasl-mechanisms, run the chosen mechanism over
sasl-init and sasl-response frames, and send the outcome.

The layer produces SASL frame bodies and a result; the connection frames them and switches to AMQP afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..codec import conditions
from ..codec.sasl_frames import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from ..types import symbol
from .errors import RemoteProtocolError
from .sasl_mechanisms import (
    SERVER_MECHANISM_NAMES,
    ClientMechanism,
    CredentialStore,
    ExternalServer,
    SaslCode,
    SaslMechanismError,
    ServerMechanism,
    outcome_error,
    select_client_mechanism,
    server_mechanism,
)

__all__ = ["SaslClient", "SaslResult", "SaslServer"]


class SaslResult:
    """How a SASL exchange ended.

    Attributes:
        ok: True when the outcome was ``ok``.
        code: the sasl-code (§5.3.3.6).
        mechanism: the mechanism used.
        identity: on a server, the authenticated user ("anonymous" for ANONYMOUS); None on a client.
        error: on failure, the error that describes it.
        authorization: on a server, the identity the client asked to act as (an authzid), or None.
    """

    __slots__ = ("authorization", "code", "error", "identity", "mechanism", "ok")

    def __init__(
        self,
        code: int,
        mechanism: str,
        identity: str | None = None,
        error: SaslMechanismError | None = None,
        authorization: str | None = None,
    ) -> None:
        self.code = code
        self.ok = code == SaslCode.OK
        self.mechanism = mechanism
        self.identity = identity
        self.error = error
        self.authorization = authorization


class SaslClient:
    """Client-side SASL negotiation.

    Args:
        user: the user name (None: none).
        password: the password (None: none).
        authzid: the identity to act as (None: the user's own).
        token: the bearer token, for XOAUTH2 (None: none).
        allowed_mechs: the mechanisms the caller allows (a space-separated string or a list), or None for any.
        allow_insecure_mechs: allow mechanisms that send secrets in clear over an unencrypted transport.
        encrypted: whether the transport is encrypted (TLS).
        hostname: the hostname sent in sasl-init.
    """

    def __init__(
        self,
        *,
        user: str | None = None,
        password: str | None = None,
        authzid: str | None = None,
        token: str | None = None,
        allowed_mechs: Sequence[str] | str | None = None,
        allow_insecure_mechs: bool = False,
        encrypted: bool = False,
        hostname: str | None = None,
    ) -> None:
        self.user = user
        self.password = password
        self.authzid = authzid
        self.token = token
        self.allowed_mechs = allowed_mechs
        self.allow_insecure_mechs = allow_insecure_mechs
        self.encrypted = encrypted
        self.hostname = hostname
        self.mechanism: ClientMechanism | None = None
        self.result: SaslResult | None = None

    def on_frame(self, body: Any) -> list[Any]:
        """Take a SASL frame from the server; return the frames to send back.

        Raises:
            SaslMechanismError: no mechanism fits, or the server's messages fail the mechanism's checks.
            RemoteProtocolError: the server sent a frame out of turn.
        """
        if isinstance(body, SaslMechanisms):
            if self.mechanism is not None:
                raise RemoteProtocolError("sasl-mechanisms sent twice", condition=conditions.NOT_ALLOWED)
            offered = [str(name) for name in body.sasl_server_mechanisms or ()]
            self.mechanism = select_client_mechanism(
                offered,
                self.allowed_mechs,
                user=self.user,
                password=self.password,
                authzid=self.authzid,
                token=self.token,
                encrypted=self.encrypted,
                allow_insecure=self.allow_insecure_mechs,
            )
            return [
                SaslInit(
                    mechanism=symbol(self.mechanism.name),
                    initial_response=self.mechanism.initial_response(),
                    hostname=self.hostname,
                )
            ]
        if self.mechanism is None:
            raise RemoteProtocolError(f"{type(body).__name__} before sasl-mechanisms", condition=conditions.NOT_ALLOWED)
        if isinstance(body, SaslChallenge):
            return [SaslResponse(response=self.mechanism.respond(body.challenge or b""))]
        if isinstance(body, SaslOutcome):
            code = int(body.code)
            if code == SaslCode.OK:
                self.mechanism.verify_outcome(body.additional_data)
                self.result = SaslResult(code, self.mechanism.name)
            else:
                self.result = SaslResult(code, self.mechanism.name, error=outcome_error(code, body.additional_data))
            return []
        raise RemoteProtocolError(f"unexpected SASL frame {type(body).__name__}", condition=conditions.NOT_ALLOWED)


class SaslServer:
    """Server-side SASL negotiation.

    Args:
        mechanisms: the mechanisms to offer, strongest first (default: ANONYMOUS only, the broker's default).
        store: the credential check for PLAIN and SCRAM (see :class:`CredentialStore`).
        external: for EXTERNAL, a function giving the identity the channel established when the client chooses
            it (the subject of its TLS certificate), or None; EXTERNAL may be offered only with it.
        authorize: decides whether an authenticated user may act as the other identity its client asked for
            (``authorize(user, authzid)``, PLAIN and EXTERNAL); None (the default) refuses any but the user's own.
            The identity asked for is in the result's ``authorization``.
    """

    def __init__(
        self,
        mechanisms: Sequence[str] | str = ("ANONYMOUS",),
        store: CredentialStore | None = None,
        *,
        external: Callable[[], str | None] | None = None,
        authorize: Callable[[str, str], bool] | None = None,
    ) -> None:
        names = mechanisms.split() if isinstance(mechanisms, str) else list(mechanisms)
        known = (*SERVER_MECHANISM_NAMES, "EXTERNAL") if external is not None else SERVER_MECHANISM_NAMES
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(f"unsupported server SASL mechanisms {unknown}; supported: {known}")
        if store is None and any(name not in ("ANONYMOUS", "EXTERNAL") for name in names):
            raise ValueError("PLAIN and SCRAM need a credential store")
        self.mechanisms = names
        self.store = store
        self.external = external
        self.authorize = authorize
        self.mechanism: ServerMechanism | None = None
        self.result: SaslResult | None = None

    def start(self) -> list[Any]:
        """The frame that opens the exchange: our sasl-mechanisms (EXTERNAL only when the channel established an
        identity by now, as proton's server does)."""
        names = self.mechanisms
        if "EXTERNAL" in names and (self.external is None or self.external() is None):
            names = [name for name in names if name != "EXTERNAL"]
            self.mechanisms = names
        return [SaslMechanisms(sasl_server_mechanisms=tuple(symbol(name) for name in names))]

    def on_frame(self, body: Any) -> list[Any]:
        """Take a SASL frame from the client; return the frames to send back (a challenge or the outcome)."""
        if isinstance(body, SaslInit):
            if self.mechanism is not None:
                raise RemoteProtocolError("sasl-init sent twice", condition=conditions.NOT_ALLOWED)
            name = str(body.mechanism)
            if name not in self.mechanisms:
                self.result = SaslResult(
                    SaslCode.AUTH, name, error=outcome_error(SaslCode.AUTH, f"mechanism {name} not offered".encode())
                )
                return [SaslOutcome(code=int(SaslCode.AUTH))]
            if name == "EXTERNAL" and self.external is not None:
                self.mechanism = ExternalServer(self.external())
            else:
                self.mechanism = server_mechanism(name, self.store)  # type: ignore[arg-type]
            self.mechanism.authorize = self.authorize
            challenge, done = self.mechanism.start(body.initial_response)
        elif isinstance(body, SaslResponse):
            if self.mechanism is None or self.mechanism.done:
                raise RemoteProtocolError("sasl-response out of turn", condition=conditions.NOT_ALLOWED)
            challenge, done = self.mechanism.step(body.response or b"")
        else:
            raise RemoteProtocolError(f"unexpected SASL frame {type(body).__name__}", condition=conditions.NOT_ALLOWED)
        if not done:
            return [SaslChallenge(challenge=challenge or b"")]
        mechanism = self.mechanism
        code = int(mechanism.outcome if mechanism.outcome is not None else SaslCode.AUTH)
        self.result = SaslResult(
            code,
            mechanism.name,
            identity=mechanism.identity,
            error=None if code == SaslCode.OK else outcome_error(code),
            authorization=mechanism.authorization,
        )
        return [SaslOutcome(code=code, additional_data=mechanism.additional_data)]
