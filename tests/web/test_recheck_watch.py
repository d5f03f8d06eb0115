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


AWAY_ONCE = """
import asyncio, json, logging
import django
django.setup()
import redis
from xumpweb import redis_clients
from xumpweb.live import security

security.WATCH_EVERY = 0.01
said = []


class Said(logging.Handler):
    def emit(self, record):
        said.append((record.levelname, record.getMessage()))


logging.getLogger("xump.live").addHandler(Said())
logging.getLogger("xump.live").setLevel(logging.INFO)


class Flaky:
    # the tokens' version read: answers, fails 50 times (Redis away), answers again
    def __init__(self):
        self.reads = 0

    async def get(self, key):
        self.reads += 1
        if 2 <= self.reads <= 51:
            raise redis.ConnectionError("Connection refused")
        return b"1"

    async def aclose(self):
        pass


flaky = Flaky()
redis_clients.general = lambda **options: flaky


class Connection:
    async def recheck(self):
        pass


async def run():
    connection = Connection()
    security.watch(connection)
    for _ in range(2000):
        if flaky.reads > 60:
            break
        await asyncio.sleep(0.01)
    security.unwatch(connection)
    await asyncio.sleep(0.05)


asyncio.run(run())
print(json.dumps({"said": said, "reads": flaky.reads}))
"""


def test_an_outage_is_logged_once_not_at_every_look(redis_server, tmp_path) -> None:
    """The watcher looks four times a second: while Redis is away it said so at every look
    (a warning four times a second per process); now once an outage, and once when the
    version can be read again."""
    seen = django_script(redis_server.url, tmp_path, AWAY_ONCE)
    assert seen["reads"] > 51
    warnings = [text for level, text in seen["said"] if level == "WARNING"]
    assert len(warnings) == 1 and "tokens' version" in warnings[0], seen["said"]
    assert any("again" in text for level, text in seen["said"] if level == "INFO")
