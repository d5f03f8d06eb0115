"""STOMP over TCP: the server the `stomp_server` command runs (Procfile's `stomp`).

Only I/O: asyncio streams; each connection's bytes go to its session (session.py), which
writes back through `write` (TCP's back pressure reaches the pumps: a write waits for the
socket's buffer to drain below its high-water mark).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from xumpweb import metrics
from xumpweb.stompgate.session import Link, StompSession

logger = logging.getLogger("xump.stomp")

KIND = "stomp-tcp"
READ_SIZE = 256 * 1024


class _Connection(Link):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.gone = False
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername") or ("", 0)
        self.remote = f"{peer[0]}:{peer[1]}" if peer and peer[0] else ""

    lost = (ConnectionError, OSError)

    async def _put(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionError("the socket is closing")
        self.writer.write(data)
        await self.writer.drain()

    async def _shut(self) -> None:
        try:
            self.writer.write_eof()
        except (OSError, RuntimeError):
            pass
        self.writer.close()

    async def serve(self) -> None:
        session = StompSession(self, KIND, self.remote)
        metrics.stomp_connected(KIND)
        try:
            while not session.closed:
                try:
                    data = await self.reader.read(READ_SIZE)
                except (ConnectionError, OSError):
                    break
                if not data:
                    break
                await session.receive_data(data)
        except Exception:
            logger.exception("STOMP connection from %s failed", self.remote)
        finally:
            await session.finish()
            if not self.gone:
                self.gone = True
                self.writer.close()


async def serve(host: str, port: int, started: asyncio.Event | None = None) -> None:
    """Serve STOMP on host:port until cancelled. OSError when the port is taken."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _Connection(reader, writer).serve()

    server = await asyncio.start_server(handle, host, port, limit=READ_SIZE)
    logger.info("STOMP server listening on %s:%d", host, port)
    if started is not None:
        started.set()
    async with server:
        await server.serve_forever()
