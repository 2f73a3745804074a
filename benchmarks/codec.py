"""Message encode/decode time, side by side: amqp_async, python-qpid-proton and Azure's pure-Python _pyamqp.

Run: ``python benchmarks/codec.py`` (or ``nox -s bench``). Each client does the same work in the timed region:

- encode: turn an already-built message object into its wire bytes;
- decode: turn wire bytes into a new message object whose fields can be read (a fresh message each time). Ours
  decodes a message laid out as one decoded before by that layout (``amqp_async/message/_layouts.py``: a producer's
  messages share theirs), as every repetition here is; ``decode_general`` times its general decoder, the one a
  message of a layout not yet learnt goes through, on the same bytes (proton has one decoder: its row repeats).

Two messages: a small one (148 bytes: id, subject, content_type, durable, two
application properties, a 48-character string body) and a 1 MiB binary body. Timing: the best of several
repeats of a timed loop (the usual ``timeit`` practice: the minimum is the run least disturbed by the rest of
the machine), after a warm-up loop, for every client alike; the clients take turns, one loop each per repeat, so
that a slower spell of the shared machine falls on all of them rather than on whichever was measured then.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import amqp_async
from amqp_async.message import Message

SMALL = {
    "id": "msg-0000000000000001",
    "subject": "benchmark!!",
    "content_type": "text/plain",
    "durable": True,
    "properties": {"k1": "value-1", "k2": 42},
    "body": "x" * 48,
}
LARGE_BODY = bytes(range(256)) * 4096  # 1 MiB


#: What each client provides: the small message's encoded size, and a callable per measured task.
Tasks = tuple[int, dict[str, Callable[[], object]]]
#: The calls per timed loop of each task: the small message's and the 1 MiB message's.
LARGE_TASKS = ("encode_1mib", "decode_1mib")


def measure(clients: dict[str, Tasks], number: int, large_number: int, repeat: int = 7) -> dict[str, dict[str, float]]:
    """Seconds per call of every client's tasks (and its ``size``): each callable warmed up, then the best of
    ``repeat`` timed loops, the clients taking turns within each repeat."""
    tasks = ("encode", "decode", "decode_general", *LARGE_TASKS)
    calls = {task: large_number if task in LARGE_TASKS else number for task in tasks}
    best: dict[str, dict[str, float]] = {name: {"size": float(size)} for name, (size, _) in clients.items()}
    for _, tasks in clients.values():
        for task, function in tasks.items():
            function()
            timeit.timeit(function, number=max(1, calls[task] // 10))
    for _ in range(repeat):
        for name, (_, tasks) in clients.items():
            for task, function in tasks.items():
                seconds = timeit.timeit(function, number=calls[task]) / calls[task]
                best[name][task] = min(best[name].get(task, seconds), seconds)
    return best


def all_clients() -> dict[str, Tasks]:
    """The tasks of every client installed: ours, python-qpid-proton's and Azure _pyamqp's."""
    clients = {"amqp_async " + amqp_async.__version__: ours()}
    for name, tasks in (("python-qpid-proton", proton_tasks()), ("azure _pyamqp", pyamqp_tasks())):
        if tasks is None:
            print(f"({name} not installed: not measured)")
        else:
            clients[name] = tasks
    return clients


def ours() -> Tasks:
    small = Message(**SMALL)
    small_bytes = small.encode()
    large = Message(body=LARGE_BODY)
    large_bytes = large.encode()

    def decode_small() -> Message:
        message = Message()
        message.decode(small_bytes)
        return message

    def decode_large() -> Message:
        message = Message()
        message.decode(large_bytes)
        return message

    def decode_general() -> Message:
        message = Message()
        message._decode_sections(small_bytes)  # what decode() does for a message whose layout is not learnt
        return message

    assert decode_small().body == SMALL["body"] == decode_general().body
    assert decode_large().body == LARGE_BODY
    return len(small_bytes), {
        "encode": small.encode,
        "decode": decode_small,
        "decode_general": decode_general,
        "encode_1mib": large.encode,
        "decode_1mib": decode_large,
    }


def proton_tasks() -> Tasks | None:
    try:
        import proton
    except ImportError:
        return None
    small = proton.Message(**SMALL)
    small_bytes = small.encode()
    large = proton.Message(body=LARGE_BODY)
    large.inferred = True  # a data section, as ours sends it
    large_bytes = large.encode()

    def decode_small() -> proton.Message:
        message = proton.Message()
        message.decode(small_bytes)
        return message

    def decode_large() -> proton.Message:
        message = proton.Message()
        message.decode(large_bytes)
        return message

    assert decode_small().body == SMALL["body"]
    assert bytes(decode_large().body) == LARGE_BODY
    return len(small_bytes), {
        "encode": small.encode,
        "decode": decode_small,
        "encode_1mib": large.encode,
        "decode_1mib": decode_large,
    }


def pyamqp_tasks() -> Tasks | None:
    try:
        from azure.servicebus._pyamqp import _decode, _encode
        from azure.servicebus._pyamqp.message import Header, Properties
        from azure.servicebus._pyamqp.message import Message as AzureMessage
    except ImportError:
        return None
    small = AzureMessage(
        header=Header(durable=True),
        properties=Properties(message_id=SMALL["id"], subject=SMALL["subject"], content_type=SMALL["content_type"]),
        application_properties=SMALL["properties"],
        value=SMALL["body"],
    )
    large = AzureMessage(data=[LARGE_BODY])

    def encode_small() -> bytes:
        return bytes(_encode.encode_payload(bytearray(), small))

    def encode_large() -> bytes:
        return bytes(_encode.encode_payload(bytearray(), large))

    small_bytes = encode_small()
    large_bytes = encode_large()

    def decode_small() -> object:
        return _decode.decode_payload(memoryview(small_bytes))

    def decode_large() -> object:
        return _decode.decode_payload(memoryview(large_bytes))

    return len(small_bytes), {
        "encode": encode_small,
        "decode": decode_small,
        "encode_1mib": encode_large,
        "decode_1mib": decode_large,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timed loop (small message)")
    parser.add_argument("--large-number", type=int, default=200, help="calls per timed loop (1 MiB message)")
    args = parser.parse_args()

    results = measure(all_clients(), args.number, args.large_number)

    reference = results.get("python-qpid-proton")
    print()
    print(
        "Message codec (best of 7, the clients in turn; µs per message; MB/s for 1 MiB; x = speed relative to proton)"
    )
    header = (
        f"{'client':<22}{'bytes':>6}{'encode µs':>11}{'decode µs':>11}{'general µs':>11}{'enc 1MiB MB/s':>15}"
        f"{'dec 1MiB MB/s':>15}"
    )
    print(header)
    print("-" * len(header))
    mib = len(LARGE_BODY) / 1e6
    for name, figures in results.items():
        row = (
            f"{name:<22}{figures['size']:>6.0f}{figures['encode'] * 1e6:>11.2f}{figures['decode'] * 1e6:>11.2f}"
            f"{figures.get('decode_general', figures['decode']) * 1e6:>11.2f}"
            f"{mib / figures['encode_1mib']:>15.0f}{mib / figures['decode_1mib']:>15.0f}"
        )
        if reference is not None and figures is not reference:
            row += (
                f"   x{reference['encode'] / figures['encode']:.2f} enc"
                f"  x{reference['decode'] / figures['decode']:.2f} dec"
                f"  x{reference['encode_1mib'] / figures['encode_1mib']:.2f} enc1M"
                f"  x{reference['decode_1mib'] / figures['decode_1mib']:.2f} dec1M"
            )
        print(row)


if __name__ == "__main__":
    main()
