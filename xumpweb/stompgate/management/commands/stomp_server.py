"""`python manage.py stomp_server`: STOMP 1.2 over TCP on XUMP_STOMP_HOST:XUMP_STOMP_PORT."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve STOMP 1.2 over TCP (XUMP_STOMP_HOST, XUMP_STOMP_PORT; default 127.0.0.1:61613)"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=None, help="default: XUMP_STOMP_PORT")
        parser.add_argument("--host", default=None, help="default: XUMP_STOMP_HOST")

    def handle(self, *args: Any, **options: Any) -> None:
        from xumpweb import collector, runtime

        runtime.client_only()
        collector.settle()  # start-up is over (xumpweb/collector.py)

        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        host = options["host"] or settings.XUMP_STOMP_HOST
        port = options["port"] if options["port"] is not None else settings.XUMP_STOMP_PORT
        try:
            asyncio.run(self.serve(host, port))
        except OSError as problem:
            if problem.errno == errno.EADDRINUSE:
                sys.stderr.write(
                    f"xump stomp: port {port} on {host} is already taken (another STOMP "
                    f"server, e.g. RabbitMQ's plugin?); set XUMP_STOMP_PORT to a free port\n"
                )
                sys.exit(2)
            raise
        except KeyboardInterrupt:
            pass

    async def serve(self, host: str, port: int) -> None:
        """Serve; with XUMP_STOMP_ROUTES, route the store first while serving (SPEC §11's
        co-located path, xumpweb/router/watch.py) until SIGTERM or SIGINT, and let the
        lease go on the way out, so a worker takes it over at once."""
        from xumpweb.router import watch
        from xumpweb.stompgate import tcp

        if not settings.XUMP_STOMP_ROUTES:
            await tcp.serve(host, port)
            return
        listening = asyncio.Event()
        serving = asyncio.ensure_future(tcp.serve(host, port, listening))
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, serving.cancel)
        try:
            await asyncio.wait([serving, asyncio.ensure_future(listening.wait())],
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            if not serving.done():
                watch.start(node=f"stomp@{socket.gethostname()}", prefer=True)
            await serving
        except asyncio.CancelledError:
            pass
        finally:
            await asyncio.to_thread(watch.stop)
