"""A connection's credentials are checked again whenever a token or a role changes
(xumpweb/live/security.py: one watcher reads the tokens' version four times a second and
calls every watched connection's `recheck`). The watcher starts with the first connection
after none was watched; a token revoked between that connection's check and the watcher's
first read moved the version before the watcher ever saw it, so the connection kept its
revoked token for good (a STOMP test waited 60 s for the close on a loaded machine). The
watcher checks the connections once more at its first look.

In a subprocess with Django set up (the test process does not set Django up).
"""

from __future__ import annotations

from tests.web.conftest import django_script

FIRST_LOOK = """
import asyncio, json
import django
django.setup()
from xumpweb.live import security


class Connection:
    def __init__(self):
        self.rechecks = 0

    async def recheck(self):
        self.rechecks += 1


async def run():
    connection = Connection()
    security.watch(connection)  # checked before this (at its connect), the version unchanged
    for _ in range(400):
        if connection.rechecks:
            break
        await asyncio.sleep(0.05)
    security.unwatch(connection)
    return connection.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""


def test_the_watcher_checks_the_connections_once_more_at_its_first_look(
    redis_server, tmp_path
) -> None:
    seen = django_script(redis_server.url, tmp_path, FIRST_LOOK)
    # at least once: another test revoking a token meanwhile (the same Redis) adds one
    assert seen["rechecks"] >= 1
