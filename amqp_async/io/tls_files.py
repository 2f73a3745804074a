"""Loading a certificate chain from PEM files, with an error that says what is missing.

``ssl.SSLContext.load_cert_chain`` reports a certificate file without its private key (and no key file given) as
``[SSL] PEM lib (_ssl.c:...)``, which names neither the file nor what it lacks. The client's options, the command
line and the embedded broker load their certificates through :func:`load_cert_chain`.
"""

from __future__ import annotations

import ssl

__all__ = ["MissingPrivateKey", "load_cert_chain"]


class MissingPrivateKey(ssl.SSLError):
    """A certificate file without its private key, and no key file given."""

    def __init__(self, cert: str) -> None:
        message = f"{cert} holds a certificate and no private key: give the key's file too (--tls-key, key=...)"
        super().__init__(message)
        self.reason = message

    def __str__(self) -> str:
        return str(self.reason)


def load_cert_chain(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    """``context.load_cert_chain(cert, key)``.

    Raises:
        OSError: a file that cannot be read.
        ssl.SSLError: one that cannot be used; a ``cert`` without a private key, and no ``key`` given, says so.
    """
    try:
        context.load_cert_chain(cert, key or None)
    except ssl.SSLError as exc:
        if not key and not _holds_private_key(cert):
            raise MissingPrivateKey(cert) from exc
        raise


def _holds_private_key(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return b"PRIVATE KEY-----" in file.read(1 << 20)
    except OSError:
        return True  # unreadable: ssl's own error stands
