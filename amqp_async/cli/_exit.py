"""The exit codes of ``amqp-async`` and which failure gives which."""

from __future__ import annotations

import enum

from ..codec.conditions import LINK_MESSAGE_SIZE_EXCEEDED
from ..errors import (
    AMQPError,
    AuthenticationError,
    ConnectionError,
    DeliveryError,
    LinkError,
    SessionError,
)

__all__ = ["CommandFailed", "ExitCode", "exit_code_for"]


class ExitCode(enum.IntEnum):
    """What the exit status of ``amqp-async`` says."""

    #: everything asked for was done.
    OK = 0
    #: a failure none of the codes below names (a bug, an unreadable file...).
    FAILURE = 1
    #: bad arguments or input: an unknown option, a bad URL, an invalid connect.json or JSON line.
    USAGE = 2
    #: the connection could not be made or ended (a :class:`~amqp_async.ConnectionError`): a name that does not
    #: resolve, refused, unreachable, timed out connecting (a ConnectTimeout, though also a TimeoutError), TLS or
    #: certificate, closed by the peer, lost.
    CONNECTION = 3
    #: the peer refused the credentials (SASL), or no SASL mechanism suits both sides.
    AUTHENTICATION = 4
    #: fewer messages came than ``--count`` asked for within ``--timeout``, or a send did not complete in time.
    TIMEOUT = 5
    #: a message was rejected, released or modified by the peer, or its outcome is in doubt, or it is larger than
    #: the peer takes (``amqp:link:message-size-exceeded``).
    NOT_ACCEPTED = 6
    #: the peer refused or ended a link or session (an unknown address, a forbidden one, a bad selector).
    LINK = 7
    #: interrupted by Ctrl-C (SIGINT), as shells report it (128 + 2).
    INTERRUPTED = 130
    #: the reader of the output went away (a pipe closed, as with ``| head``): ended quietly, as a program that
    #: SIGPIPE ends is reported (128 + 13); the messages received and not written were released, not settled.
    OUTPUT_CLOSED = 141


class CommandFailed(Exception):
    """A failure the command reports itself: its message is printed and the process exits with ``code``."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def exit_code_for(error: BaseException) -> ExitCode:
    """The exit code for an error that ended a command.

    Subclasses come before their bases: an :class:`AuthenticationError` is also a :class:`ConnectionError`, and a
    :class:`~amqp_async.ConnectTimeout` (a connection failure) also a :class:`TimeoutError`. A
    :class:`~amqp_async.ClosedByApplication` (a program's mistake) is a plain failure.
    """
    if isinstance(error, CommandFailed):
        return error.code
    if isinstance(error, AuthenticationError):
        return ExitCode.AUTHENTICATION
    if isinstance(error, ConnectionError):
        return ExitCode.CONNECTION
    if isinstance(error, DeliveryError) or (
        isinstance(error, AMQPError) and error.condition == LINK_MESSAGE_SIZE_EXCEEDED
    ):
        # larger than the peer takes (§2.7.3): refused before it was sent, or its link detached for it
        return ExitCode.NOT_ACCEPTED
    if isinstance(error, (LinkError, SessionError)):
        return ExitCode.LINK
    if isinstance(error, TimeoutError):
        return ExitCode.TIMEOUT
    if isinstance(error, (ValueError, TypeError)):  # a bad URL, a bad connect.json (ConnectConfigError)
        return ExitCode.USAGE
    return ExitCode.FAILURE
