"""The I/O layer: what drives the Sans-IO engine (:mod:`amqp_async.protocol`) over a byte stream.

Layers read from the folders, each depending only on those before it::

    codec -> protocol -> io -> client / broker -> proton / spark / cli

* :mod:`.driver`: :class:`~.driver.EngineDriver`, the reader and writer tasks of one connection, shared by the
  awaitable client, the embedded broker and the proton-compatible API;
* :mod:`.direct_stream`: one synchronous, gathered write of the engine's output on asyncio TCP streams;
* :mod:`.read_size`: how many bytes each read asks for;
* :mod:`.websocket`: the AMQP WebSocket binding's handshakes and framing over any anyio byte stream;
* :mod:`.runner`: ``anyio.run`` with Python 3.11's Ctrl-C behaviour on 3.10 too, for the programs the package
  runs itself (proton's ``Container.run()``, the command line).

Nothing here is public API: the modules are internal to the package, and their names may change.
"""
