"""Sans-IO AMQP 1.0 engine: connection, session, link and delivery state machines, and SASL.

Nothing under this package performs I/O or reads the clock: it takes bytes (and the current time) as arguments
and hands back events and bytes to send. It must not import asyncio, anyio, trio, uvloop, socket, ssl, select,
selectors, threading, subprocess or time.
"""
