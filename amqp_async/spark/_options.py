"""The ``amqp`` data source's options: parsed, validated and turned into ``connect()`` arguments.

Spark hands a data source its options as strings, with the keys lowercased (``.option("maxMessagesPerBatch",
"500")`` arrives as ``{"maxmessagesperbatch": "500"}``). :func:`parse_options` maps each key back to its documented
name, converts each value, and refuses an unknown key or a malformed value with an :class:`OptionError` that names
it. That happens when the :class:`~amqp_async.spark.AmqpDataSource` is made, which Spark does at ``load()``,
``save()`` and ``start()``: a typo fails the query before anything runs. Options that belong to another operation
(``readMode`` on a write, ``maxInFlight`` on a read) are refused when that operation starts (:meth:`AmqpOptions.
check_for`).

Nothing here imports pyspark: the options are plain values, pickled with the data source to every process.
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..client._config import resolve_options, tls_context
from ..errors import AMQPError

__all__ = ["READ", "STREAM_READ", "WINDOW_BYTES", "WRITE", "AmqpOptions", "OptionError", "parse_options"]

READ = "batch read"
STREAM_READ = "streaming read"
WRITE = "write"
_READS = (READ, STREAM_READ)
_ALL = (READ, STREAM_READ, WRITE)


class OptionError(AMQPError, ValueError):
    """An option of the ``amqp`` data source is unknown, malformed, or does not apply to the operation."""

    default_condition = "amqp:invalid-field"


def _text(name: str, value: str) -> str:
    return value


def _whole_number(minimum: int, maximum: int | None = None) -> Callable[[str, str], int]:
    """A parser of whole numbers of at least ``minimum`` (and at most ``maximum``)."""

    def parse(name: str, value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise OptionError(f"option {name!r} must be a whole number, got {value!r}") from None
        if number < minimum or (maximum is not None and number > maximum):
            bound = "at least 1" if minimum == 1 else f"{minimum} or more"
            if maximum is not None:
                bound = f"from {minimum} to {maximum:,}"
            raise OptionError(f"option {name!r} must be {bound}, got {value!r}")
        return number

    return parse


#: AMQP's uint (credit, a frame size: §2.7.4, §2.7.1).
_UINT_MAX = 2**32 - 1
#: The longest wait an option may ask for, in milliseconds: about 24.8 days (a signed 32-bit count, as Java's
#: timeouts). Beyond some size a wait is no longer a time the platform can add to its clock.
_MAX_MS = 2**31 - 1
_positive_int = _whole_number(1)
#: The most partitions of a read. Each is a task with a connection and a link of its own to the peer (per
#: micro-batch, for a stream), and the driver lists them all: beyond this, a typo such as numPartitions=1000000 made
#: a million tasks per micro-batch, and the driver's planner ran out of memory (about 300 bytes each) before a
#: single task ran, rather than fail with an error that names the option.
MAX_PARTITIONS = 10_000
_partition_count = _whole_number(1, MAX_PARTITIONS)
#: The most message bytes a reader takes or holds at once by default (the ``windowBytes`` option): a streaming
#: task's share of a micro-batch, a batch read's window, the driver's messages held and waiting.
WINDOW_BYTES = 128 * 1024 * 1024
_credit = _whole_number(1, _UINT_MAX)
_frame_size = _whole_number(512, _UINT_MAX)  # §2.4.1: MIN-MAX-FRAME-SIZE is 512
_milliseconds = _whole_number(1, _MAX_MS)
_milliseconds_or_zero = _whole_number(0, _MAX_MS)


def _heartbeat(name: str, value: str) -> float:
    """Seconds above 0 (the idle timeout advertised, §2.4.5) and at most :data:`_MAX_MS` milliseconds: the one bound
    is said for every number outside it (0, a negative number, infinity, NaN)."""
    try:
        seconds = float(value.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a number of seconds, got {value!r}") from None
    if not 0 < seconds <= _MAX_MS / 1000:  # False for NaN too
        raise OptionError(f"option {name!r} must be above 0 and at most {_MAX_MS // 1000:,} seconds, got {value!r}")
    return seconds


def _boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {value!r}")


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in choices:
            raise OptionError(f"option {name!r} must be one of {', '.join(choices)}; got {value!r}")
        return lowered

    return parse


def _location(name: str, value: str) -> str:
    """A directory every node can reach: an absolute local path, or a URI with a scheme (hdfs://, s3://...)."""
    location = value.strip()
    if not (location.startswith("/") or "://" in location):
        raise OptionError(
            f"option {name!r} must be an absolute path or a URI (file://, hdfs://, s3://, gs://, abfs://...): {value!r}"
        )
    return location


@attrs.frozen
class _Spec:
    name: str
    parse: Callable[[str, str], Any]
    operations: tuple[str, ...]
    doc: str


#: Every option: its documented name, how its value is read, the operations it applies to, what it means.
#: docs/spark.md's table says the same; tests/test_spark_options.py checks that the two agree.
OPTIONS: tuple[_Spec, ...] = (
    _Spec("url", _text, _ALL, "peer URL, or several separated by commas (a failover list)"),
    _Spec("address", _text, _ALL, "the node to read from or write to (``load(path)`` sets it too)"),
    _Spec("user", _text, _ALL, "SASL user (a user in the URL wins)"),
    _Spec("password", _text, _ALL, "SASL password (a password in the URL wins)"),
    _Spec("saslEnabled", _boolean, _ALL, "use a SASL layer (default true)"),
    _Spec("saslMechanisms", _text, _ALL, "SASL mechanisms allowed, space-separated"),
    _Spec("saslAllowInsecure", _boolean, _ALL, "allow PLAIN without TLS (default true, as proton)"),
    _Spec("virtualHost", _text, _ALL, "hostname sent in the open frame"),
    _Spec("sni", _text, _ALL, "TLS server name"),
    _Spec("heartbeat", _heartbeat, _ALL, "idle timeout to advertise, in seconds"),
    _Spec("maxFrameSize", _frame_size, _ALL, "largest frame to accept, in bytes"),
    _Spec("sslCaFile", _text, _ALL, "CA certificates to trust (PEM file), for amqps URLs"),
    _Spec("sslCertFile", _text, _ALL, "client certificate (PEM file)"),
    _Spec("sslKeyFile", _text, _ALL, "client certificate's private key (PEM file)"),
    _Spec("sslVerify", _boolean, _ALL, "check the peer's certificate and host name (default true)"),
    _Spec(
        "connectTimeoutMs",
        _milliseconds,
        _ALL,
        "how long connecting and attaching may take, a peer that is down tried again meanwhile (default 30000)",
    ),
    _Spec("credit", _credit, _READS, "link credit: messages prefetched and not yet handed to Spark"),
    _Spec("windowBytes", _positive_int, _READS, "most message bytes a reader takes or holds at once (128 MiB)"),
    _Spec("receiveOn", _choice("executors", "driver"), (STREAM_READ,), "streaming read: executors (default) or driver"),
    _Spec("logLocation", _location, (STREAM_READ,), "the write-ahead log's directory (a pyarrow.fs path or URI)"),
    _Spec("selector", _text, _READS, "JMS message selector (a source filter)"),
    _Spec("subscriptionName", _text, _READS, "durable subscription: the link name, with a durable source"),
    _Spec("maxMessagesPerBatch", _positive_int, (STREAM_READ,), "most messages in one micro-batch"),
    _Spec("pollWaitMs", _milliseconds_or_zero, (STREAM_READ,), "how long to wait for a first message (default 1000)"),
    _Spec("numPartitions", _partition_count, _READS, "Spark partitions per (micro-)batch (default 1)"),
    _Spec("readMode", _choice("browse", "consume"), (READ,), "batch read: browse (default) or consume"),
    _Spec("maxMessages", _positive_int, (READ,), "batch read: most messages per partition"),
    _Spec("deliveryMode", _choice("at-least-once", "at-most-once"), (WRITE,), "default at-least-once"),
    _Spec("maxInFlight", _positive_int, (WRITE,), "unsettled messages per task (default 1000)"),
    _Spec(
        "sendTimeoutMs",
        _milliseconds_or_zero,
        (WRITE,),
        "how long a write task waits for credit, an outcome or a commit before it fails (default 120000; 0: for ever)",
    ),
    _Spec("durable", _boolean, (WRITE,), "mark every message durable (a durable column wins)"),
    _Spec("transactional", _boolean, (WRITE,), "each task sends its rows in one AMQP transaction (default false)"),
)
_BY_KEY = {spec.name.lower(): spec for spec in OPTIONS}
#: Keys Spark itself puts among a data source's options; they are taken, not refused.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})


@attrs.frozen
class AmqpOptions:
    """The validated options of one ``amqp`` read or write (see docs/spark.md for each)."""

    values: Mapping[str, Any] = attrs.field(factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """The value of option ``name`` (its documented spelling), or ``default`` when it was not given."""
        return self.values.get(name, default)

    @property
    def address(self) -> str | None:
        """The node to read from or write to."""
        return self.values.get("address")

    @property
    def connect_timeout(self) -> float:
        """Seconds that connecting and attaching a link may take."""
        return float(self.values.get("connectTimeoutMs", 30000)) / 1000.0

    def check_for(self, operation: str) -> None:
        """Refuse options that do not apply to ``operation`` (:data:`READ`, :data:`STREAM_READ`, :data:`WRITE`).

        Raises:
            OptionError: naming the first such option, or a missing ``address`` on a read.
        """
        for name in self.values:
            spec = next(spec for spec in OPTIONS if spec.name == name)
            if operation not in spec.operations:
                raise OptionError(
                    f"option {name!r} does not apply to a {operation} (it applies to: {', '.join(spec.operations)})"
                )
        if operation in _READS and not self.address:
            raise OptionError(f"a {operation} needs the option 'address' (the node to read from)")

        if operation == READ and self.values.get("readMode", "browse") == "browse" and "numPartitions" in self.values:
            raise OptionError(
                "option 'numPartitions' applies to readMode=consume (competing receivers): a browse is one partition"
            )
        if operation == STREAM_READ and self.receive_on == "executors" and "subscriptionName" in self.values:
            raise OptionError(
                "option 'subscriptionName' (a durable subscription: one link) needs receiveOn=driver: on the "
                "executors every task attaches a link of its own"
            )

    @property
    def receive_on(self) -> str:
        """Where a streaming read receives: ``executors`` (default) or ``driver``."""
        return str(self.values.get("receiveOn", "executors"))

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`amqp_async.connect` (reconnecting off: Spark retries and restarts; a first
        connect is tried again within ``connectTimeoutMs`` by the data source itself, :func:`~._links.open_receiver`).

        Raises:
            OptionError: a TLS file option names a file that cannot be read here.
        """
        kwargs = self._connection_kwargs()
        context = self._ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        return kwargs

    def _connection_kwargs(self) -> dict[str, Any]:
        values = self.values
        kwargs: dict[str, Any] = {"reconnect": False}
        url = values.get("url")
        if url:
            kwargs["urls"] = _urls(url)
        for option, argument in (
            ("user", "user"),
            ("password", "password"),
            ("saslEnabled", "sasl_enabled"),
            ("saslMechanisms", "allowed_mechs"),
            ("saslAllowInsecure", "allow_insecure_mechs"),
            ("virtualHost", "virtual_host"),
            ("sni", "sni"),
            ("heartbeat", "heartbeat"),
            ("maxFrameSize", "max_frame_size"),
        ):
            if option in values:
                kwargs[argument] = values[option]
        return kwargs

    def _ssl_context(self) -> ssl.SSLContext | None:
        values = self.values
        if not any(name in values for name in ("sslCaFile", "sslCertFile", "sslKeyFile", "sslVerify")):
            return None
        try:
            return tls_context(
                ca=values.get("sslCaFile"),
                cert=values.get("sslCertFile"),
                key=values.get("sslKeyFile"),
                verify=values.get("sslVerify") is not False,
            )
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(f"the TLS options (sslCaFile, sslCertFile, sslKeyFile) cannot be used: {exc}") from exc


def _urls(url: str) -> list[str]:
    """The URLs of the ``url`` option: one, or a failover list separated by commas."""
    return [part.strip() for part in url.split(",") if part.strip()]


#: Why an empty value of a text option is refused, where it would otherwise be taken silently as "not given": a
#: reader whose ``selector`` came out empty (an unset variable in a job's configuration) took every message of the
#: queue, those meant for other consumers included, and an empty ``subscriptionName`` read through a link that is
#: not durable. Every text option is refused when empty but ``password`` (an empty password is a password) and
#: ``virtualHost`` (empty: no hostname in the open frame, as proton's ``virtual_host=""``).
_EMPTY_MEANS = {
    "url": "connect.json, or amqp://localhost",
    "address": "no node",
    "selector": "no selector: every message of the node, those meant for other consumers too",
    "subscriptionName": "no durable subscription, a link that is not durable",
    "user": "no user",
    "saslMechanisms": "no list: the default mechanisms",
    "sni": "the URL's host name",
    "sslCaFile": "the system's CAs",
    "sslCertFile": "no client certificate",
    "sslKeyFile": "the key in sslCertFile",
}


def _refuse_empty(name: str, value: str) -> None:
    """Refuse an empty (or blank) value of a text option that would be taken as "not given" (:data:`_EMPTY_MEANS`)."""
    if name in _EMPTY_MEANS and not value.strip():
        raise OptionError(
            f"option {name!r} is empty (it would be taken as {_EMPTY_MEANS[name]}): give a value, or leave the "
            "option out"
        )


def _unknown(key: str) -> OptionError:
    """The error for an unknown option ``key``, with the documented names it is closest to (Spark lowercases keys,
    so the key said is the lowercased one)."""
    close = difflib.get_close_matches(key.lower(), list(_BY_KEY), n=1, cutoff=0.75)
    hint = f"; did you mean {_BY_KEY[close[0]].name!r}?" if close else ""
    known = ", ".join(spec.name for spec in OPTIONS)
    return OptionError(f"unknown option {key!r} for the amqp data source{hint} (known options: {known})")


def _raw_address(raw: Mapping[str, str]) -> str | None:
    """The ``address`` option as given (any case of the key), or None."""
    for key, value in raw.items():
        if key.lower() == "address" and value is not None:
            return str(value)
    return None


def parse_options(raw: Mapping[str, str]) -> AmqpOptions:
    """Validate the options Spark gives a data source (keys in any case, values as strings).

    Raises:
        OptionError: an unknown option, a malformed value, or a URL that cannot be parsed; the message names it.
    """
    values: dict[str, Any] = {}
    for key, value in raw.items():
        lowered = key.lower()
        if lowered in _SPARK_KEYS:
            if lowered == "path" and value:
                path = str(value)
                given = _raw_address(raw)
                if given is not None and given != path:
                    raise OptionError(
                        f"two addresses: option 'address' is {given!r} and load()/save() names {path!r}: give one"
                    )
                values.setdefault("address", path)
            continue
        spec = _BY_KEY.get(lowered)
        if spec is None:
            raise _unknown(key)
        if value is None:
            raise OptionError(f"option {spec.name!r} has no value")
        if spec.parse is _text:
            _refuse_empty(spec.name, str(value))
        if spec.name == "url" and not _urls(str(value)):
            # Commas alone name no peer: connect() would be given none and fall back on connect.json or localhost.
            raise OptionError(f"option 'url' names no URL (a failover list is URLs separated by commas): {value!r}")
        values[spec.name] = spec.parse(spec.name, str(value))
    # Options that contradict each other, whatever the operation.
    if values.get("receiveOn") == "driver" and "logLocation" in values:
        raise OptionError("option 'logLocation' applies to receiveOn=executors only (the driver keeps no log)")
    if values.get("transactional") and values.get("deliveryMode") == "at-most-once":
        raise OptionError("option 'transactional' needs deliveryMode at-least-once (the default)")
    options = AmqpOptions(values)
    # The URL list and credentials are checked as connect() checks them, here, on the driver. The TLS files are
    # read where connections are made (they may exist only on the executors).
    try:
        resolve_options(None, options._connection_kwargs())
    except (TypeError, ValueError) as exc:
        raise OptionError(f"option 'url' (or a connection option) is not valid: {exc}") from exc
    return options
