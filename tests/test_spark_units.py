"""The ``amqp`` data source's parts that need no running Spark: options, the schema and its two conversions.

The conversions are checked against python-qpid-proton as the oracle: messages proton encodes become rows with
proton's own field values, and messages built from rows decode, in proton, to the rows' values.
"""

from __future__ import annotations

import datetime
import pickle
import uuid

import proton
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from amqp_async import codec
from amqp_async.spark import (
    MESSAGE_SCHEMA,
    AmqpDataSource,
    AmqpDriverStreamReader,
    AmqpStreamReader,
    OptionError,
    SchemaError,
)
from amqp_async.spark._options import OPTIONS, READ, STREAM_READ, WRITE, parse_options
from amqp_async.spark._schema import MessageBuilder, RowBuilder, read_schema
from amqp_async.types import Described, ulong

UTC = datetime.timezone.utc


# --- options -----------------------------------------------------------------------------------------------------


def test_lowercased_keys_are_mapped_back_to_their_names_and_values_parsed() -> None:
    options = parse_options(
        {"url": "amqp://a:1, amqp://b:2", "address": "q", "maxmessagesperbatch": "500", "pollwaitms": "0"}
    )
    assert options.get("maxMessagesPerBatch") == 500
    assert options.get("pollWaitMs") == 0
    assert options.connect_kwargs()["urls"] == ["amqp://a:1", "amqp://b:2"]
    assert options.connect_kwargs()["reconnect"] is False


def test_an_unknown_option_is_refused_by_name() -> None:
    with pytest.raises(OptionError, match="unknown option 'maxmesagesperbatch'") as caught:
        parse_options({"address": "q", "maxmesagesperbatch": "5"})
    assert caught.value.condition == "amqp:invalid-field"


def test_a_misspelt_option_is_refused_with_the_name_it_is_closest_to() -> None:
    # Spark lowercases the keys: the suggestion gives the documented spelling.
    with pytest.raises(OptionError, match=r"unknown option 'pollwaitmillis'.*did you mean 'pollWaitMs'"):
        parse_options({"address": "q", "pollwaitmillis": "5"})
    with pytest.raises(OptionError) as caught:
        parse_options({"address": "q", "colour": "blue"})
    assert "did you mean" not in str(caught.value)


def test_empty_values_that_mean_something_are_taken() -> None:
    # An empty password is a password; an empty virtualHost sends no hostname (as proton's virtual_host="").
    options = parse_options({"address": "q", "user": "u", "password": "", "virtualhost": ""})
    assert options.connect_kwargs()["password"] == "" and options.connect_kwargs()["virtual_host"] == ""


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("credit", "many", "option 'credit' must be a whole number, got 'many'"),
        ("credit", "0", "option 'credit' must be from 1 to 4,294,967,295"),
        ("pollwaitms", "-1", "option 'pollWaitMs' must be from 0 to 2,147,483,647"),
        # before: accepted, then each task failed with "the link's credit would be 10000000000, above 2**32 - 1"
        ("credit", "10000000000", "option 'credit' must be from 1 to 4,294,967,295"),
        # before: accepted, then "OverflowError: timestamp out of range for platform time_t" in each task
        ("connectTimeoutMs", "99999999999999", "option 'connectTimeoutMs' must be from 1 to 2,147,483,647"),
        ("sendTimeoutMs", "-5", "option 'sendTimeoutMs' must be from 0 to 2,147,483,647"),
        # before: taken, then the driver planned a million partitions (300 MB, a connection each per micro-batch)
        ("numPartitions", "1000000", "option 'numPartitions' must be from 1 to 10,000"),
        # before: "option 'url' (or a connection option) is not valid: max_frame_size must be between 512..."
        ("maxFrameSize", "100", "option 'maxFrameSize' must be from 512 to 4,294,967,295"),
        # before: taken ("0 or more"), then refused as "option 'url' ...: heartbeat must be > 0 seconds"
        ("heartbeat", "0", "option 'heartbeat' must be above 0"),
        ("url", " ", "option 'url' is empty"),  # before: connect.json or localhost, silently
        ("url", " , ", "option 'url' names no URL"),  # before: connect.json or localhost, silently, too
        ("heartbeat", "soon", "option 'heartbeat' must be a number of seconds"),
        ("sslverify", "perhaps", "option 'sslVerify' must be true or false"),
        ("readmode", "peek", "option 'readMode' must be one of browse, consume"),
        ("url", "http://host", "option 'url'"),
        # before: "must be 0 or more" for NaN and a negative number, whose bound is above 0
        ("heartbeat", "nan", "option 'heartbeat' must be above 0 and at most 2,147,483 seconds, got 'nan'"),
        ("heartbeat", "-1", "option 'heartbeat' must be above 0 and at most"),
        ("heartbeat", "-inf", "option 'heartbeat' must be above 0 and at most"),
        ("heartbeat", "inf", "option 'heartbeat' must be above 0 and at most"),
        ("pollwaitms", "nan", "option 'pollWaitMs' must be a whole number, got 'nan'"),
        ("windowbytes", "0", "option 'windowBytes' must be at least 1"),
        ("maxmessagesperbatch", "inf", "option 'maxMessagesPerBatch' must be a whole number"),
        # before: taken silently as not given: every message of the queue read, a link that is not durable
        ("selector", "", "option 'selector' is empty .*every message of the node"),
        ("selector", "  ", "option 'selector' is empty"),
        ("subscriptionname", "", "option 'subscriptionName' is empty"),
        ("sslcafile", "", "option 'sslCaFile' is empty"),
        ("user", "", "option 'user' is empty"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_option(key: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options({"address": "q", key: value})


def test_options_of_another_operation_are_refused_when_it_starts() -> None:
    options = parse_options({"address": "q", "readMode": "consume"})
    options.check_for(READ)
    with pytest.raises(OptionError, match="option 'readMode' does not apply to a write"):
        options.check_for(WRITE)
    with pytest.raises(OptionError, match="option 'readMode' does not apply to a streaming read"):
        options.check_for(STREAM_READ)
    with pytest.raises(OptionError, match="needs the option 'address'"):
        parse_options({"url": "amqp://h"}).check_for(STREAM_READ)
    parse_options({"url": "amqp://h"}).check_for(WRITE)  # a write may route by each row's 'to'


def test_a_streaming_read_receives_on_the_executors_unless_told_and_options_of_the_other_mode_are_refused() -> None:
    executors = AmqpDataSource({"address": "q", "logLocation": "s3://bucket/log?region=eu-west-1"})
    assert isinstance(executors.streamReader(MESSAGE_SCHEMA), AmqpStreamReader)
    driver = AmqpDataSource({"address": "q", "receiveOn": "Driver", "credit": "500"})
    assert isinstance(driver.streamReader(MESSAGE_SCHEMA), AmqpDriverStreamReader)
    with pytest.raises(OptionError, match="'logLocation' applies to receiveOn=executors only"):
        AmqpDataSource({"address": "q", "receiveOn": "driver", "logLocation": "/log"})
    with pytest.raises(OptionError, match=r"'subscriptionName' .* needs receiveOn=driver"):
        AmqpDataSource({"address": "t", "subscriptionName": "s1"}).streamReader(MESSAGE_SCHEMA)
    AmqpDataSource({"address": "t", "subscriptionName": "s1", "receiveOn": "driver"}).streamReader(MESSAGE_SCHEMA)


@pytest.mark.parametrize("location", ["relative/log", "log", "./log"])
def test_a_log_location_that_is_not_absolute_is_refused(location: str) -> None:
    with pytest.raises(OptionError, match="option 'logLocation' must be an absolute path or a URI"):
        parse_options({"address": "q", "logLocation": location})


def test_transactional_is_a_write_option_that_needs_at_least_once() -> None:
    assert parse_options({"address": "q", "transactional": "TRUE"}).get("transactional") is True
    with pytest.raises(OptionError, match="'transactional' does not apply to a streaming read"):
        parse_options({"address": "q", "transactional": "true"}).check_for(STREAM_READ)
    with pytest.raises(OptionError, match="'transactional' needs deliveryMode at-least-once"):
        parse_options({"address": "q", "transactional": "true", "deliveryMode": "at-most-once"})


def test_a_stream_reader_pickles_without_its_planning_state() -> None:
    reader = AmqpDataSource({"address": "q", "logLocation": "/tmp/amqp-log"}).streamReader(MESSAGE_SCHEMA)
    start = reader.initialOffset()
    assert start == {"source": start["source"], "batch": 0} and len(start["source"]) == 32
    assert reader.initialOffset() == start  # asked again by Spark before the first batch: the same source
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._source is None and copy._log is None
    with pytest.raises(ValueError, match="receiveOn=driver"):
        reader.latestOffset({"messages": 10}, None)


def test_load_path_is_the_address_and_spark_own_keys_are_taken() -> None:
    options = parse_options({"path": "orders", "checkpointlocation": "/tmp/x"})
    assert options.address == "orders"
    assert parse_options({"path": "orders", "address": "orders"}).address == "orders"
    # before: load("b") with option address "a" read "a", "b" dropped without a word
    with pytest.raises(OptionError, match="two addresses: option 'address' is 'a' and load\\(\\)/save\\(\\) names 'b'"):
        parse_options({"address": "a", "path": "b"})


def test_num_partitions_is_refused_for_a_browse_it_would_not_change() -> None:
    parse_options({"address": "q", "readMode": "consume", "numPartitions": "4"}).check_for(READ)
    with pytest.raises(OptionError, match="'numPartitions' applies to readMode=consume"):
        parse_options({"address": "q", "numPartitions": "4"}).check_for(READ)  # before: one partition, silently


def test_tls_files_that_cannot_be_read_are_named(tmp_path: object) -> None:
    options = parse_options({"url": "amqps://h", "sslCaFile": "/nonexistent/ca.pem"})
    with pytest.raises(OptionError, match="sslCaFile"):
        options.connect_kwargs()


def test_every_option_is_in_the_documentation() -> None:
    with open("docs/spark.md", encoding="utf-8") as page:
        text = page.read()
    missing = [spec.name for spec in OPTIONS if f"`{spec.name}`" not in text]
    assert missing == []


def test_the_data_source_refuses_bad_options_at_construction_and_pickles() -> None:
    with pytest.raises(OptionError, match="unknown option 'adress'"):
        AmqpDataSource({"adress": "q"})
    source = AmqpDataSource({"url": "amqp://h:5672", "address": "q"})
    copy = pickle.loads(pickle.dumps(source))
    assert copy.amqp_options == source.amqp_options


# --- reading: proton-encoded messages become rows -----------------------------------------------------------------


def _proton_message() -> proton.Message:
    message = proton.Message(body="héllo")
    message.id = "id-1"
    message.user_id = b"alice"
    message.address = "q"
    message.subject = "subj"
    message.reply_to = "replies"
    message.correlation_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    message.content_type = "text/plain"
    message.content_encoding = "utf-8"
    message.expiry_time = 1_700_000_100.5
    message.creation_time = 1_700_000_000.25
    message.group_id = "g"
    message.group_sequence = 7
    message.reply_to_group_id = "rg"
    message.durable = True
    message.priority = 9
    message.ttl = 60.0
    message.first_acquirer = True
    message.delivery_count = 3
    message.annotations = {proton.symbol("x-opt-a"): 1}
    message.properties = {"k": "v", "n": 5, "b": True}
    return message


def _row(batch: pa.RecordBatch) -> dict[str, object]:
    [row] = batch.to_pylist()
    return row  # type: ignore[no-any-return]


def test_a_proton_message_becomes_a_row_of_its_fields() -> None:
    builder = RowBuilder(MESSAGE_SCHEMA)
    row = _row(builder.batch([_proton_message().encode()]))
    assert row == {
        "body": "héllo".encode(),
        "body_type": "string",
        "message_id": "id-1",
        "message_id_type": "string",
        "user_id": b"alice",
        "to": "q",
        "subject": "subj",
        "reply_to": "replies",
        "correlation_id": "12345678-1234-5678-1234-567812345678",
        "correlation_id_type": "uuid",
        "content_type": "text/plain",
        "content_encoding": "utf-8",
        "absolute_expiry_time": datetime.datetime(2023, 11, 14, 22, 15, 0, 500000, tzinfo=UTC),
        "creation_time": datetime.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=UTC),
        "group_id": "g",
        "group_sequence": 7,
        "reply_to_group_id": "rg",
        "durable": True,
        "priority": 9,
        "ttl": 60000,
        "first_acquirer": True,
        "delivery_count": 3,
        "message_annotations": [("x-opt-a", "1")],
        "application_properties": [("k", "v"), ("n", "5"), ("b", "true")],
    }
    # The batch has exactly the Arrow schema Spark expects of the read schema (Spark checks it).
    assert builder.arrow_schema.equals(to_arrow_schema(MESSAGE_SCHEMA, timezone="UTC"))


@pytest.mark.parametrize(
    ("body", "inferred", "expected_type"),
    [
        (b"\x00\xff", True, "data"),
        (b"\x00\xff", False, "binary"),
        ({"a": [1, 2]}, False, "value"),
        ([1, "two"], True, "sequence"),
        (None, False, "null"),
    ],
)
def test_each_body_kind_is_recoverable_from_body_and_body_type(
    body: object, inferred: bool, expected_type: str
) -> None:
    message = proton.Message(body=body)
    message.inferred = inferred
    row = _row(RowBuilder(MESSAGE_SCHEMA).batch([message.encode()]))
    assert row["body_type"] == expected_type
    if expected_type in ("data", "binary"):
        assert row["body"] == body
    elif expected_type in ("value", "sequence"):
        assert codec.decode(row["body"]) == body  # type: ignore[arg-type]
    else:
        assert row["body"] is None


def test_a_user_schema_narrows_the_columns_and_may_read_the_body_as_text() -> None:
    schema = StructType([StructField("body", StringType()), StructField("subject", StringType())])
    assert read_schema(schema) is schema
    row = _row(RowBuilder(schema).batch([_proton_message().encode()]))
    assert row == {"body": "héllo", "subject": "subj"}


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (StructField("colour", StringType()), "column 'colour' is not a message field"),
        (StructField("priority", StringType()), "column 'priority' must be of type int, not string"),
    ],
)
def test_a_user_schema_that_does_not_narrow_the_message_is_refused(field: StructField, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        read_schema(StructType([StructField("body", BinaryType()), field]))


def test_an_undecodable_message_is_a_row_of_its_raw_bytes_between_the_others() -> None:
    """Not an AMQP message (a truncated amqp-value): its bytes as the body, body_type undecodable, the rest null; the
    messages around it read as usual (nothing of the failed decode carries over)."""
    garbage = b"\x00\x53\x77\xa1\x05ab"
    payloads = [proton.Message(body="ok", id="a").encode(), garbage, proton.Message(body="ok", id="b").encode()]
    rows = RowBuilder(MESSAGE_SCHEMA).batch(payloads).to_pylist()
    assert [(row["body"], row["body_type"], row["message_id"]) for row in rows] == [
        (b"ok", "string", "a"),
        (garbage, "undecodable", None),
        (b"ok", "string", "b"),
    ]
    assert all(value is None for name, value in rows[1].items() if name not in ("body", "body_type"))


@pytest.mark.parametrize("seconds", [1_764_000_000_000_000.0, -1e13, 253402300800.0])
def test_a_time_outside_sparks_range_reads_as_null_not_a_failure(seconds: float) -> None:
    """A time outside Spark's years 1 to 9999 (``seconds``, as proton takes them): nanoseconds written where
    milliseconds belong (1.764e18, November 2025 in nanoseconds), a time long before year 1, year 10000. Before, the
    first two failed the batch with an OverflowError (a stream, at every retry and restart), the third read as a
    timestamp that Python's datetime cannot hold."""
    message = proton.Message(body="x", id="a")
    message.creation_time = seconds
    message.expiry_time = seconds
    row = RowBuilder(MESSAGE_SCHEMA).batch([message.encode(), proton.Message(body="y").encode()]).to_pylist()[0]
    assert (row["creation_time"], row["absolute_expiry_time"], row["message_id"]) == (None, None, "a")


def test_the_ends_of_sparks_time_range_are_read() -> None:
    message = proton.Message(body="x")
    message.creation_time = -62135596800.0  # 0001-01-01T00:00:00Z
    message.expiry_time = 253402300799.999  # 9999-12-31T23:59:59.999Z
    row = RowBuilder(MESSAGE_SCHEMA).batch([message.encode()]).to_pylist()[0]
    assert row["creation_time"] == datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)
    assert row["absolute_expiry_time"] == datetime.datetime(
        9999, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.timezone.utc
    )


# --- writing: rows become messages proton decodes to the same values ---------------------------------------------


def _arrow(schema: StructType, rows: list[dict[str, object]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(schema, timezone="UTC"))


def _decoded(message: object) -> proton.Message:
    result = proton.Message()
    result.decode(message.encode())  # type: ignore[attr-defined]
    return result


def test_rows_become_messages_that_proton_decodes_to_the_row_values() -> None:
    schema = StructType(
        [
            StructField("body", StringType()),
            StructField("subject", StringType()),
            StructField("priority", IntegerType()),
            StructField("ttl", LongType()),
            StructField("creation_time", TimestampType()),
            StructField("correlation_id", StringType()),
            StructField("correlation_id_type", StringType()),
            StructField("application_properties", MapType(StringType(), LongType())),
        ]
    )
    created = datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    rows = [
        {
            "body": "one",
            "subject": "s",
            "priority": 7,
            "ttl": 1500,
            "creation_time": created,
            "correlation_id": "42",
            "correlation_id_type": "ulong",
            "application_properties": [("n", 5)],
        }
    ]
    [message] = MessageBuilder(schema, "write:3").messages(_arrow(schema, rows))
    decoded = _decoded(message)
    assert decoded.body == "one"
    assert decoded.subject == "s"
    assert decoded.priority == 7
    assert decoded.ttl == 1.5
    assert decoded.creation_time == created.timestamp()
    assert decoded.correlation_id == 42
    assert isinstance(message.correlation_id, ulong)  # a ulong on the wire (proton hands it back as an int)
    assert decoded.properties == {"n": 5}
    assert decoded.id == "write:3:0"  # deterministic: prefix and row number


def test_message_ids_count_rows_across_the_batches_of_a_task() -> None:
    schema = StructType([StructField("body", BinaryType()), StructField("message_id", StringType())])
    builder = MessageBuilder(schema, "w:0")
    first = list(
        builder.messages(_arrow(schema, [{"body": b"a", "message_id": None}, {"body": b"b", "message_id": "mine"}]))
    )
    second = list(builder.messages(_arrow(schema, [{"body": b"c", "message_id": None}])))
    assert [m.id for m in first + second] == ["w:0:0", "mine", "w:0:2"]
    assert _decoded(first[0]).body == b"a"  # a binary column travels in a data section


def test_a_full_read_row_writes_back_the_same_message() -> None:
    original = _proton_message()
    original.properties = {"k": "v"}
    original.annotations = {proton.symbol("x-opt-a"): "1"}
    [row] = RowBuilder(MESSAGE_SCHEMA).batch([original.encode()]).to_pylist()
    [message] = MessageBuilder(MESSAGE_SCHEMA, "p").messages(_arrow(MESSAGE_SCHEMA, [row]))
    decoded = _decoded(message)
    for name in (
        "body", "id", "user_id", "address", "subject", "reply_to", "correlation_id", "content_type",
        "content_encoding", "expiry_time", "creation_time", "group_id", "group_sequence", "reply_to_group_id",
        "durable", "priority", "ttl", "first_acquirer", "delivery_count", "properties", "annotations",
    ):  # fmt: skip
        assert getattr(decoded, name) == getattr(original, name), name


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"body": "ok"}, {"body": None}], "row 1: column 'body' is null"),
        ([{"body": "ok", "body_type": "json"}], "row 0: column 'body_type' is 'json'"),
        ([{"body": "ok", "message_id": "xyz", "message_id_type": "uuid"}], "row 0: column 'message_id'"),
        ([{"body": "ok", "priority": 300}], "row 0: column 'priority'"),
    ],
)
def test_a_row_that_cannot_become_a_message_is_named_with_its_column(
    rows: list[dict[str, object]], message: str
) -> None:
    schema = StructType(
        [
            StructField("body", StringType()),
            StructField("body_type", StringType()),
            StructField("message_id", StringType()),
            StructField("message_id_type", StringType()),
            StructField("priority", IntegerType()),
        ]
    )
    full_rows = [{name: row.get(name) for name in schema.fieldNames()} for row in rows]
    with pytest.raises(SchemaError, match=message):
        list(MessageBuilder(schema, "p").messages(_arrow(schema, full_rows)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([StructField("subject", StringType())], "a write needs a 'body' column"),
        ([StructField("body", StringType()), StructField("colour", StringType())], "column 'colour' is not"),
        ([StructField("body", IntegerType())], "column 'body' has type int"),
        (
            [StructField("body", StringType()), StructField("application_properties", MapType(LongType(), LongType()))],
            "column 'application_properties' has type map<bigint,bigint>",
        ),
    ],
)
def test_a_dataframe_that_cannot_be_written_is_refused_naming_the_column(
    fields: list[StructField], message: str
) -> None:
    with pytest.raises(SchemaError, match=message):
        MessageBuilder(StructType(fields), "p")


def test_without_an_address_every_row_needs_a_to() -> None:
    with pytest.raises(SchemaError, match="a write needs a 'to' column"):
        MessageBuilder(StructType([StructField("body", StringType())]), "p", need_to=True)
    schema = StructType([StructField("body", StringType()), StructField("to", StringType())])
    with pytest.raises(SchemaError, match="row 1: column 'to' is null"):
        list(
            MessageBuilder(schema, "p", need_to=True).messages(
                _arrow(schema, [{"body": "a", "to": "q"}, {"body": "b", "to": None}])
            )
        )


@pytest.mark.parametrize("descriptor", [0x24, 0x1D, 0x7777])
def test_a_value_body_written_keeps_the_applications_described_value(descriptor: int) -> None:
    """A ``value`` body column holds the application's AMQP encoding: a described value in it is sent as it was
    written, whatever its descriptor (0x24 is accepted's, 0x1d error's in frames: read as those, the body became
    an outcome, or the row was refused); bytes after the value are refused."""
    from amqp_async.spark._schema import SchemaError, _write_body

    data = proton.Data()
    data.put_object(proton.Described(proton.ulong(descriptor), [1, 2]))
    encoded = bytes(data.encode())
    body, inferred = _write_body(encoded, "value")
    assert (body.__class__, body.descriptor, body.value, inferred) == (Described, descriptor, [1, 2], False)
    with pytest.raises(SchemaError, match="1 bytes remain after the value"):
        _write_body(encoded + b"\x40", "value")
