"""Message encode/decode time, side by side: amqp_async, python-qpid-proton and Azure's pure-Python _pyamqp.

Run: ``python benchmarks/codec.py`` (or ``nox -s bench``). Each client does the same work in the timed region:

- encode: turn an already-built message object into its wire bytes;
- decode: turn wire bytes into a new message object whose fields can be read (a fresh message each time).

Two messages: the small one of DESIGN.md's table (148 bytes: id, subject, content_type, durable, two
application properties, a 48-character string body) and a 1 MiB binary body. Timing: the best of several
repeats of a timed loop (the usual ``timeit`` practice: the minimum is the run least disturbed by the rest of
the machine), after a warm-up loop, for every client alike.
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


def best_time(func: Callable[[], object], number: int, repeat: int = 5) -> float:
    """Seconds per call: warm up once, then the best of ``repeat`` loops of ``number`` calls."""
    func()
    timeit.timeit(func, number=max(1, number // 10))
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number


def ours(number: int, large_number: int) -> dict[str, float]:
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

    assert decode_small().body == SMALL["body"]
    assert decode_large().body == LARGE_BODY
    return {
        "size": len(small_bytes),
        "encode": best_time(small.encode, number),
        "decode": best_time(decode_small, number),
        "encode_1mib": best_time(large.encode, large_number),
        "decode_1mib": best_time(decode_large, large_number),
    }


def proton_figures(number: int, large_number: int) -> dict[str, float] | None:
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
    return {
        "size": len(small_bytes),
        "encode": best_time(small.encode, number),
        "decode": best_time(decode_small, number),
        "encode_1mib": best_time(large.encode, large_number),
        "decode_1mib": best_time(decode_large, large_number),
    }


def pyamqp_figures(number: int, large_number: int) -> dict[str, float] | None:
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

    return {
        "size": len(small_bytes),
        "encode": best_time(encode_small, number),
        "decode": best_time(decode_small, number),
        "encode_1mib": best_time(encode_large, large_number),
        "decode_1mib": best_time(decode_large, large_number),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timed loop (small message)")
    parser.add_argument("--large-number", type=int, default=200, help="calls per timed loop (1 MiB message)")
    args = parser.parse_args()

    results = {"amqp_async " + amqp_async.__version__: ours(args.number, args.large_number)}
    for name, figures in (
        ("python-qpid-proton", proton_figures(args.number, args.large_number)),
        ("azure _pyamqp", pyamqp_figures(args.number, args.large_number)),
    ):
        if figures is None:
            print(f"({name} not installed: not measured)")
        else:
            results[name] = figures

    reference = results.get("python-qpid-proton")
    print()
    print("Message codec (best of 5; µs per message; MB/s for 1 MiB; x = speed relative to proton)")
    header = f"{'client':<22}{'bytes':>6}{'encode µs':>11}{'decode µs':>11}{'enc 1MiB MB/s':>15}{'dec 1MiB MB/s':>15}"
    print(header)
    print("-" * len(header))
    mib = len(LARGE_BODY) / 1e6
    for name, figures in results.items():
        row = (
            f"{name:<22}{figures['size']:>6}{figures['encode'] * 1e6:>11.2f}{figures['decode'] * 1e6:>11.2f}"
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
