"""Connect over TLS (amqps), verifying the server's certificate, and send one message.

    python examples/tls.py URL ADDRESS CA_FILE [CLIENT_CERT CLIENT_KEY]

Peer verification and the hostname check are on by default for amqps URLs; here the trusted CA is given
explicitly (a self-signed test CA, say), and a client certificate is sent when one is given. The same settings can
come from connect.json's "tls" map (ca, cert, key, verify).
"""

from __future__ import annotations

import ssl
import sys

import anyio

import amqp_async


async def main(url: str, address: str, ca_file: str, cert: str | None, key: str | None) -> None:
    context = ssl.create_default_context(cafile=ca_file)  # CERT_REQUIRED and check_hostname=True
    if cert:
        context.load_cert_chain(cert, key)
    async with amqp_async.connect(url, ssl_context=context) as connection:
        sender = await connection.open_sender(address)
        outcome = await sender.send(amqp_async.Message(body="over TLS"))
        print(f"sent over TLS to {connection.address}: {outcome}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    url, address, ca_file = sys.argv[1:4]
    cert = sys.argv[4] if len(sys.argv) > 4 else None
    key = sys.argv[5] if len(sys.argv) > 5 else None
    anyio.run(main, url, address, ca_file, cert, key)
