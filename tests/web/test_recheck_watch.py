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


AWAY_AT_FIRST = """
import asyncio, json
import django
django.setup()
import redis
from xumpweb import redis_clients
from xumpweb.live import security

security.WATCH_EVERY = 0.01


class Flaky:
    # Redis away at the watcher's first three looks; then the version 1, and 2 from the
    # 20th read on (a token revoked)
    def __init__(self):
        self.reads = 0

    async def get(self, key):
        self.reads += 1
        if self.reads <= 3:
            raise redis.ConnectionError("Connection refused")
        return b"1" if self.reads < 20 else b"2"

    async def aclose(self):
        pass


flaky = Flaky()
redis_clients.general = lambda **options: flaky


class Connection:
    def __init__(self):
        self.rechecks = 0

    async def recheck(self):
        self.rechecks += 1


async def run():
    connection = Connection()
    security.watch(connection)
    for _ in range(2000):
        if flaky.reads > 25 or (security._watcher is not None and security._watcher.done()):
            break
        await asyncio.sleep(0.01)
    security.unwatch(connection)
    return connection.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""


def test_a_watcher_whose_first_look_finds_redis_away_goes_on_looking(
    redis_server, tmp_path
) -> None:
    """The first read of the tokens' version was outside the watcher's handling of Redis
    errors: with Redis away when the first connection of a process was watched (its token
    read from the database), the watcher died and no revocation closed it."""
    seen = django_script(redis_server.url, tmp_path, AWAY_AT_FIRST)
    assert seen["rechecks"] == 2  # at the first version read, and when it moved


EXIT_RACE = """
import asyncio, json
import django
django.setup()
from xumpweb import redis_clients
from xumpweb.live import security

security.WATCH_EVERY = 0.01
version = [b"1"]
closing = asyncio.Event()


class Slow:
    # a client whose close takes a while: the watcher leaving is still running meanwhile
    async def get(self, key):
        return version[0]

    async def aclose(self):
        closing.set()
        await asyncio.sleep(0.2)


redis_clients.general = lambda **options: Slow()


class Connection:
    def __init__(self):
        self.rechecks = 0

    async def recheck(self):
        self.rechecks += 1


async def run():
    first, second = Connection(), Connection()
    security.watch(first)
    security.unwatch(first)  # the watcher leaves at its next look
    await closing.wait()
    security.watch(second)  # while the leaving watcher closes its client
    version[0] = b"2"  # a token revoked
    for _ in range(400):
        if second.rechecks:
            break
        await asyncio.sleep(0.01)
    security.unwatch(second)
    return second.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""


def test_a_connection_watched_while_the_last_watcher_leaves_is_watched(
    redis_server, tmp_path
) -> None:
    """`watch` starts a watcher unless one runs; one that was leaving (nothing watched) but
    still closing its client counted as running, so the connection watched then was never
    checked again."""
    seen = django_script(redis_server.url, tmp_path, EXIT_RACE)
    assert seen["rechecks"] >= 1  # the new watcher checks it at its first look
