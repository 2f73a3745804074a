"""The ``amqp`` data source's schema: message fields as columns, and the two conversions.

Reading, :class:`RowBuilder` turns received messages into an Arrow record batch of the read schema (the full
:data:`MESSAGE_SCHEMA`, or a user schema that narrows it: fewer columns, ``body`` as a string). Writing,
:class:`MessageBuilder` turns the rows of an Arrow record batch into :class:`~amqp_async.Message` objects, and
refuses a row that cannot become one with an error that names the column and the row.

The columns (docs/spark.md has the same table):

======================== ===================== =====================================================================
column                   type                  from / to
======================== ===================== =====================================================================
body                     binary (or string)    the body: data sections' bytes, an amqp-value string as UTF-8, an
                                               amqp-value binary as it is; other amqp-value and amqp-sequence
                                               bodies as their AMQP encoding (``amqp_async.codec.decode`` restores
                                               them)
body_type                string                ``data``, ``string``, ``binary``, ``value``, ``sequence`` or
                                               ``null``: how the body travelled (and how ``body`` reads back);
                                               ``undecodable`` (read only): not an AMQP message, ``body`` holds
                                               its raw bytes and every other column is null
message_id               string                properties.message-id, as text (a ulong in decimal, a uuid in its
                                               canonical form, binary in hex)
message_id_type          string                ``string``, ``ulong``, ``uuid`` or ``binary``: restores the id's type
user_id                  binary                properties.user-id
to                       string                properties.to
subject                  string                properties.subject
reply_to                 string                properties.reply-to
correlation_id           string                properties.correlation-id, as message_id
correlation_id_type      string                as message_id_type
content_type             string                properties.content-type
content_encoding         string                properties.content-encoding
absolute_expiry_time     timestamp             properties.absolute-expiry-time (read: null outside Spark's
                                               years 1 to 9999)
creation_time            timestamp             properties.creation-time (the same)
group_id                 string                properties.group-id
group_sequence           long                  properties.group-sequence
reply_to_group_id        string                properties.reply-to-group-id
durable                  boolean               header.durable
priority                 int                   header.priority
ttl                      long                  header.ttl, in milliseconds
first_acquirer           boolean               header.first-acquirer
delivery_count           long                  header.delivery-count (failed earlier delivery attempts)
message_annotations      map<string,string>    message annotations, values as text
application_properties   map<string,string>    application properties, values as text (written from a map of
                                               strings, numbers or booleans, which keep their type)
======================== ===================== =====================================================================
"""

from __future__ import annotations

import datetime
import logging
import operator
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .. import codec
from ..codec.sections import AmqpSequence, Data
from ..errors import AMQPError, DecodeError
from ..message import Message
from ..types import byte, float32, int32, short, uint, ulong

__all__ = ["MESSAGE_SCHEMA", "MessageBuilder", "RowBuilder", "SchemaError", "read_schema"]


class SchemaError(AMQPError, ValueError):
    """A schema or a row does not fit the ``amqp`` data source: the message names the column (and the row)."""

    default_condition = "amqp:invalid-field"


log = logging.getLogger("amqp_async.spark")

#: The ``body_type`` of a payload that is not an AMQP message (its raw bytes are the ``body``).
UNDECODABLE = "undecodable"

#: The index of group-sequence among the properties section's fields (§3.2.4), as Message holds them.
_GROUP_SEQUENCE = 11
_TEXT_MAP = MapType(StringType(), StringType(), valueContainsNull=True)

#: The full read schema: every message field as a column.
MESSAGE_SCHEMA = StructType(
    [
        StructField("body", BinaryType()),
        StructField("body_type", StringType()),
        StructField("message_id", StringType()),
        StructField("message_id_type", StringType()),
        StructField("user_id", BinaryType()),
        StructField("to", StringType()),
        StructField("subject", StringType()),
        StructField("reply_to", StringType()),
        StructField("correlation_id", StringType()),
        StructField("correlation_id_type", StringType()),
        StructField("content_type", StringType()),
        StructField("content_encoding", StringType()),
        StructField("absolute_expiry_time", TimestampType()),
        StructField("creation_time", TimestampType()),
        StructField("group_id", StringType()),
        StructField("group_sequence", LongType()),
        StructField("reply_to_group_id", StringType()),
        StructField("durable", BooleanType()),
        StructField("priority", IntegerType()),
        StructField("ttl", LongType()),
        StructField("first_acquirer", BooleanType()),
        StructField("delivery_count", LongType()),
        StructField("message_annotations", _TEXT_MAP),
        StructField("application_properties", _TEXT_MAP),
    ]
)
_FULL_TYPES = {field.name: field.dataType for field in MESSAGE_SCHEMA.fields}


# --- ids ---------------------------------------------------------------------------------------------------------


def id_text(value: Any) -> tuple[str | None, str | None]:
    """A message-id or correlation-id (§3.2.11–§3.2.14) as (text, type name)."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return str(value), "string"
    if isinstance(value, uuid.UUID):
        return str(value), "uuid"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex(), "binary"
    if isinstance(value, int):
        return str(int(value)), "ulong"
    return str(value), "string"


def id_value(text: str, kind: str | None, column: str) -> Any:
    """The inverse of :func:`id_text`: ``kind`` None means a string id."""
    if kind is None or kind == "string":
        return text
    try:
        if kind == "ulong":
            return ulong(int(text))
        if kind == "uuid":
            return uuid.UUID(text)
        if kind == "binary":
            return bytes.fromhex(text)
    except (ValueError, OverflowError) as exc:
        raise SchemaError(f"column {column!r}: {text!r} is not a valid {kind} id ({exc})") from None
    raise SchemaError(f"column '{column}_type': {kind!r} is not one of string, ulong, uuid, binary")


# --- reading -----------------------------------------------------------------------------------------------------


def read_schema(user_schema: StructType | None) -> StructType:
    """The schema a read produces: the full one, or the user's when it narrows it.

    A user schema may leave columns out and may read ``body`` as a string; every column it names must be one of
    :data:`MESSAGE_SCHEMA`'s, with its type.

    Raises:
        SchemaError: naming the first column that is unknown or of another type.
    """
    if user_schema is None:
        return MESSAGE_SCHEMA
    for field in user_schema.fields:
        expected = _FULL_TYPES.get(field.name)
        if expected is None:
            raise SchemaError(
                f"column {field.name!r} is not a message field (the amqp source reads: {', '.join(_FULL_TYPES)})"
            )
        if field.name == "body" and isinstance(field.dataType, StringType):
            continue
        if field.dataType != expected:
            raise SchemaError(
                f"column {field.name!r} must be of type {expected.simpleString()}, not {field.dataType.simpleString()}"
            )
    return user_schema


def _other_body(message: Message) -> tuple[bytes | None, str]:
    """The ``body`` and ``body_type`` columns of a message whose body is not bytes (:func:`_full_row` takes that,
    the common case, inline)."""
    body: Any = message.body  # dispatched on its exact class (faster than isinstance, per row): not narrowed
    kind = body.__class__
    if kind is str:
        return body.encode("utf-8", "surrogatepass"), "string"
    if body is None:
        return None, "null"
    if kind is list and body and all(section.__class__ is Data for section in body):
        return b"".join(section.value for section in body), "data"
    if kind is list and body and all(section.__class__ is AmqpSequence for section in body):
        return codec.encode([item for section in body for item in section.value]), "sequence"
    if kind is list and message.inferred:
        return codec.encode(body), "sequence"
    return codec.encode(body), "value"


def _text_map(mapping: dict[Any, Any]) -> list[tuple[str, str | None]]:
    return [(str(key), None if value is None else _value_text(value)) for key, value in mapping.items()]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _full_row(message: Message) -> tuple[Any, ...]:
    """Every column of :data:`MESSAGE_SCHEMA`, in its order, for one decoded message (Arrow takes ints for
    timestamps and pairs for maps). One call per message: it reads the fields straight from the message's slots
    (a fraction of one accessor per column), with the common cases (a data-section body, a string message-id,
    no correlation-id) tested first and inline: it runs once per row on the executor that reads."""
    props = message._props  # §3.2.4's fields in spec order
    body: Any = message.body  # dispatched on its exact class (faster than isinstance, per row): not narrowed
    if body.__class__ is bytes:
        body_type = "data" if message._inferred else "binary"
    else:
        body, body_type = _other_body(message)
    message_id = props[0]
    if message_id.__class__ is str:
        message_id_type: str | None = "string"
    else:
        message_id, message_id_type = id_text(message_id)
    correlation_id = props[5]
    if correlation_id is None:
        correlation_id_type = None
    else:
        correlation_id, correlation_id_type = id_text(correlation_id)
    content_type, content_encoding, created, expires = props[6], props[7], props[8], props[9]
    annotations = message._annotations
    properties = message.properties
    return (
        body,
        body_type,
        message_id,
        message_id_type,
        props[1],
        props[2],
        props[3],
        props[4],
        correlation_id,
        correlation_id_type,
        None if content_type is None else str(content_type),
        None if content_encoding is None else str(content_encoding),
        None if created is None else _micros(int(created)),
        None if expires is None else _micros(int(expires)),
        props[10],
        props[_GROUP_SEQUENCE],  # None when absent (Message.group_sequence would give 0)
        props[12],
        message._durable,
        message._priority,
        message._ttl,
        message._first_acquirer,
        message._delivery_count or 0,  # absent: no prior attempt (Message.delivery_count)
        None if annotations is None else _text_map(annotations),
        None if properties is None else _text_map(properties),
    )


#: The milliseconds since the epoch of Spark's timestamps' range: 0001-01-01 to 9999-12-31 (UTC).
_FIRST_MS = -62_135_596_800_000
_LAST_MS = 253_402_300_799_999


def _micros(milliseconds: int) -> int | None:
    """A timestamp (§1.6.17: milliseconds since the epoch) as Spark's microseconds; None outside Spark's range.

    A producer that wrote nanoseconds there (``time.time_ns()``) made a value whose microseconds overflow Arrow's
    64 bits: the row failed its batch, and a stream failed on that message at every retry and restart."""
    return milliseconds * 1000 if _FIRST_MS <= milliseconds <= _LAST_MS else None


def _undecodable_row(payload: bytes) -> tuple[Any, ...]:
    """The row of a payload that is not an AMQP message (§3.2: a sequence of sections): its bytes as ``body``,
    ``body_type`` ``undecodable``, every other column null (nothing of it can be trusted)."""
    return (payload, UNDECODABLE) + (None,) * (len(MESSAGE_SCHEMA.fields) - 2)


_FULL_INDEX = {name: index for index, name in enumerate(MESSAGE_SCHEMA.fieldNames())}


class RowBuilder:
    """Turns encoded messages into Arrow record batches of one read schema."""

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._columns = [operator.itemgetter(_FULL_INDEX[field.name]) for field in self.arrow_schema]
        self._body_as_text = any(f.name == "body" and isinstance(f.dataType, StringType) for f in schema.fields)

    def batch(self, payloads: Sequence[bytes]) -> pa.RecordBatch:
        """One record batch of ``payloads`` (encoded messages), in order.

        A payload that is not an AMQP message gives a row all the same (:func:`_undecodable_row`): a read must move
        past it, or a stream would fail on it for ever.
        """
        rows = []
        message = Message()
        undecodable: list[tuple[int, DecodeError]] = []
        for index, payload in enumerate(payloads):
            try:
                message.decode(payload)
            except DecodeError as exc:
                # Failing the task would fail every retry and every restart the same way: the message comes back
                # each time, and the stream could never move past it. It becomes a row of its own instead.
                undecodable.append((index, exc))
                rows.append(_undecodable_row(payload))
                message = Message()  # nothing of the failed decode carries over to the next message
                continue
            rows.append(_full_row(message))
        if undecodable:
            first, error = undecodable[0]
            log.warning(
                "%d message(s) of the batch are not AMQP messages, read as body_type %s (the first, message %d: %s)",
                len(undecodable),
                UNDECODABLE,
                first,
                error,
            )
        count = len(payloads)
        arrays = []
        for field, column_of in zip(self.arrow_schema, self._columns, strict=True):
            # Only the read schema's columns, each taken from the rows at C speed (map over an itemgetter: a third
            # less than transposing every column with zip).
            column: list[Any] = list(map(column_of, rows))
            if self._body_as_text and field.name == "body":
                column = [None if b is None else b.decode("utf-8", "replace") for b in column]
            # A field no message has (most of §3.2.4's, in most streams) is one null array, not a conversion.
            nothing = column.count(None) == count
            arrays.append(pa.nulls(count, field.type) if nothing else pa.array(column, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


# --- writing -----------------------------------------------------------------------------------------------------

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_TEXT = (StringType,)
_WRITE_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "body": (BinaryType, StringType),
    "body_type": _TEXT,
    "message_id": (StringType, *_INTEGERS),
    "message_id_type": _TEXT,
    "user_id": (BinaryType, StringType),
    "to": _TEXT,
    "subject": _TEXT,
    "reply_to": _TEXT,
    "correlation_id": (StringType, *_INTEGERS),
    "correlation_id_type": _TEXT,
    "content_type": _TEXT,
    "content_encoding": _TEXT,
    "absolute_expiry_time": (TimestampType, TimestampNTZType),
    "creation_time": (TimestampType, TimestampNTZType),
    "group_id": _TEXT,
    "group_sequence": _INTEGERS,
    "reply_to_group_id": _TEXT,
    "durable": (BooleanType,),
    "priority": _INTEGERS,
    "ttl": _INTEGERS,
    "first_acquirer": (BooleanType,),
    "delivery_count": _INTEGERS,
    "message_annotations": (MapType,),
    "application_properties": (MapType,),
}
_PROPERTY_VALUE_TYPES = (StringType, BooleanType, BinaryType, DoubleType, FloatType, *_INTEGERS)
_SIMPLE_FIELDS = {
    "to": "address",
    "subject": "subject",
    "reply_to": "reply_to",
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "group_id": "group_id",
    "reply_to_group_id": "reply_to_group_id",
    "durable": "durable",
    "priority": "priority",
    "first_acquirer": "first_acquirer",
    "delivery_count": "delivery_count",
    "user_id": "user_id",
}


def check_write_schema(schema: StructType) -> None:
    """Refuse a DataFrame that cannot be written: no ``body`` column, an unknown column, a column of a type that
    does not fit its field.

    Raises:
        SchemaError: naming the column.
    """
    names = schema.fieldNames()
    if "body" not in names:
        raise SchemaError("a write needs a 'body' column (string or binary)")
    for field in schema.fields:
        allowed = _WRITE_TYPES.get(field.name)
        if allowed is None:
            raise SchemaError(
                f"column {field.name!r} is not a message field (the amqp sink writes: {', '.join(_WRITE_TYPES)})"
            )
        if not isinstance(field.dataType, allowed):
            names_of = ", ".join(sorted({kind().simpleString() for kind in allowed if kind is not MapType}))
            expected = names_of or "map<string, string/number/boolean>"
            raise SchemaError(f"column {field.name!r} has type {field.dataType.simpleString()}; it takes {expected}")
        if isinstance(field.dataType, MapType) and (
            not isinstance(field.dataType.keyType, StringType)
            or not isinstance(field.dataType.valueType, _PROPERTY_VALUE_TYPES)
        ):
            raise SchemaError(
                f"column {field.name!r} has type {field.dataType.simpleString()}; it takes a map with string keys "
                "and string, number, boolean or binary values"
            )


def _property_value(value: Any, kind: DataType) -> Any:
    """A map value in the AMQP type its Spark type names (ints keep their width, floats theirs)."""
    if value is None or isinstance(kind, (StringType, BooleanType, BinaryType, DoubleType, LongType)):
        return value
    if isinstance(kind, IntegerType):
        return int32(value)
    if isinstance(kind, ShortType):
        return short(value)
    if isinstance(kind, ByteType):
        return byte(value)
    if isinstance(kind, FloatType):
        return float32(value)
    return value


def _seconds(value: datetime.datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


class MessageBuilder:
    """Turns the rows of Arrow record batches (of a schema :func:`check_write_schema` accepted) into messages.

    Args:
        schema: the DataFrame's schema.
        id_prefix: message ids for rows without one are ``f"{id_prefix}:{row}"``, ``row`` counting from 0 across
            the batches of one task: deterministic, so a retried task resends the same ids.
        durable: mark every message durable unless its ``durable`` column says otherwise.
        need_to: every row must have a ``to`` address (the sender is an anonymous relay).
        partition: the Spark partition the rows belong to (for the write's logs and fault points).
    """

    def __init__(
        self, schema: StructType, id_prefix: str, *, durable: bool = False, need_to: bool = False, partition: int = 0
    ) -> None:
        check_write_schema(schema)
        if need_to and "to" not in schema.fieldNames():
            raise SchemaError("without the option 'address', a write needs a 'to' column (each row's address)")
        self._types = {field.name: field.dataType for field in schema.fields}
        self._id_prefix = id_prefix
        self._durable = durable
        self._need_to = need_to
        self.partition = partition
        self.rows = 0

    def messages(self, batch: pa.RecordBatch) -> Iterator[Message]:
        """The messages of ``batch``'s rows, in order.

        Raises:
            SchemaError: a row cannot become a message; the error names the column and the row (its index in
                this task's input, from 0).
        """
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        body_types = columns.get("body_type")
        for index in range(batch.num_rows):
            row = self.rows
            self.rows += 1
            try:
                yield self._message(columns, index, row, body_types)
            except SchemaError as exc:
                raise SchemaError(f"row {row}: {exc.description}") from None
            except (TypeError, ValueError, OverflowError) as exc:
                raise SchemaError(f"row {row}: {exc}") from exc

    def _message(self, columns: dict[str, list[Any]], index: int, row: int, body_types: list[Any] | None) -> Message:
        message = Message()
        body = columns["body"][index]
        body_type = None if body_types is None else body_types[index]
        message.body, inferred = _write_body(body, body_type)
        if inferred is not None:
            message.inferred = inferred
        if self._durable:
            message.durable = True
        for name, values in columns.items():
            value = values[index]
            if value is None or name in ("body", "body_type", "message_id_type", "correlation_id_type"):
                continue
            field = _SIMPLE_FIELDS.get(name)
            if field is not None:
                try:
                    setattr(message, field, value)
                except AMQPError as exc:
                    raise SchemaError(f"column {name!r}: {exc.description}") from None
                except (TypeError, ValueError, OverflowError) as exc:
                    raise SchemaError(f"column {name!r}: {exc}") from None
            elif name in ("message_id", "correlation_id"):
                kinds = columns.get(f"{name}_type")
                kind = None if kinds is None else kinds[index]
                if isinstance(value, int):
                    value, kind = str(value), kind or "ulong"
                setattr(message, "id" if name == "message_id" else name, id_value(value, kind, name))
            elif name == "group_sequence":
                # Set as given: proton's Message.group_sequence setter leaves a 0 out, and 0 is a position.
                message._set_property(_GROUP_SEQUENCE, uint(value))
            elif name == "ttl":
                message.ttl = value / 1000.0
            elif name == "creation_time":
                message.creation_time = _seconds(value)
            elif name == "absolute_expiry_time":
                message.expiry_time = _seconds(value)
            elif name == "application_properties":
                kind = self._types[name].valueType  # type: ignore[attr-defined]
                message.properties = {key: _property_value(item, kind) for key, item in value}
            elif name == "message_annotations":
                kind = self._types[name].valueType  # type: ignore[attr-defined]
                message.annotations = {key: _property_value(item, kind) for key, item in value}
        if message.id is None:
            message.id = f"{self._id_prefix}:{row}"
        if self._need_to and message.address is None:
            raise SchemaError("column 'to' is null, and the write has no 'address' to send it to")
        return message


def _write_body(body: Any, body_type: str | None) -> tuple[Any, bool | None]:
    """The message body, and its ``inferred`` flag, for a row's ``body`` and ``body_type`` (None when the
    DataFrame has no such column: a binary body travels in a data section, a string one as an amqp-value)."""
    if body_type is None:
        if body is None:
            raise SchemaError("column 'body' is null (a message needs a body; give body_type 'null' for none)")
        return body, None
    if body_type == "null":
        return None, None
    if body is None:
        raise SchemaError(f"column 'body' is null, but body_type is {body_type!r}")
    if body_type == "data":
        return (body.encode("utf-8") if isinstance(body, str) else body), None
    if body_type == "string":
        return (body.decode("utf-8") if isinstance(body, bytes) else body), None
    if body_type == "binary":
        return (body.encode("utf-8") if isinstance(body, str) else body), False
    if body_type in ("value", "sequence"):
        if not isinstance(body, bytes):
            raise SchemaError(f"column 'body' must be binary (an AMQP encoding) when body_type is {body_type!r}")
        try:
            # The application's value, as a message body holds it: a described value stays Described.
            value, end = codec.decode_application_value(body)
            if end != len(body):
                raise DecodeError(f"{len(body) - end} bytes remain after the value", offset=end)
        except DecodeError as exc:
            raise SchemaError(
                f"column 'body' is not a valid AMQP encoding for body_type {body_type!r}: {exc}"
            ) from None
        if body_type == "sequence":
            if not isinstance(value, list):
                raise SchemaError("column 'body' must encode a list when body_type is 'sequence'")
            return value, True
        return value, False
    raise SchemaError(f"column 'body_type' is {body_type!r}; it takes data, string, binary, value, sequence or null")
