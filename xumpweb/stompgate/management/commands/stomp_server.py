"""`python manage.py stomp_server`: STOMP 1.2 over TCP on XUMP_STOMP_HOST:XUMP_STOMP_PORT."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
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
        from xumpweb import runtime
        from xumpweb.stompgate import tcp

        runtime.client_only()
        # What Django and the imports made lives as long as the process: out of the
        # collector's sight, so its full collections (which every message's objects
        # trigger) do not walk it again and again
        gc.collect()
        gc.freeze()
        # A message's objects live while it is in flight (its frames, its pending
        # publish, its unsettled entry): thousands of allocations, so at the default
        # threshold (700) young collections moved them up a generation to be walked
        # again. At 20,000 most die young: GC time in a 100k-message bench run 0.55 s ->
        # 0.09 s. Garbage cycles live a little longer; memory does not grow with it.
        gc.set_threshold(20_000, 10, 10)

        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        host = options["host"] or settings.XUMP_STOMP_HOST
        port = options["port"] if options["port"] is not None else settings.XUMP_STOMP_PORT
        try:
            asyncio.run(tcp.serve(host, port))
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
