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

# what every script starts with: Django set up, and a connection that counts its rechecks
PREAMBLE = """
import asyncio, json, logging
import django
django.setup()
import redis
from xumpweb import redis_clients
from xumpweb.live import security


class Connection:
    def __init__(self):
        self.rechecks = 0

    async def recheck(self):
        self.rechecks += 1


class Versions:
    # the tokens' version as the watcher reads it: answer(n) for its nth read (raised when
    # it is an exception: Redis away)
    def __init__(self, answer):
        self.answer, self.reads = answer, 0

    async def get(self, key):
        self.reads += 1
        found = self.answer(self.reads)
        if isinstance(found, Exception):
            raise found
        return found

    async def aclose(self):
        pass


async def watched_while(connection, going, every=0.01):
    # `connection` watched while going() holds (20 s at most)
    security.WATCH_EVERY = every
    security.watch(connection)
    for _ in range(int(20 / every)):
        if not going():
            break
        await asyncio.sleep(every)
    security.unwatch(connection)


async def rechecked(connection, every=0.05):
    # until the connection is checked again (20 s at most)
    for _ in range(int(20 / every)):
        if connection.rechecks:
            return
        await asyncio.sleep(every)
"""

FIRST_LOOK = (
    PREAMBLE
    + """

async def run():
    connection = Connection()
    security.watch(connection)  # checked before this (at its connect), the version unchanged
    await rechecked(connection)
    security.unwatch(connection)
    return connection.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""
)


def test_the_watcher_checks_the_connections_once_more_at_its_first_look(
    redis_server, tmp_path
) -> None:
    seen = django_script(redis_server.url, tmp_path, FIRST_LOOK)
    # at least once: another test revoking a token meanwhile (the same Redis) adds one
    assert seen["rechecks"] >= 1


AWAY_ONCE = (
    PREAMBLE
    + """
said = []


class Said(logging.Handler):
    def emit(self, record):
        said.append((record.levelname, record.getMessage()))


logging.getLogger("xump.live").addHandler(Said())
logging.getLogger("xump.live").setLevel(logging.INFO)


AWAY = redis.ConnectionError("Connection refused")
# answers, fails 50 times (Redis away), answers again
flaky = Versions(lambda n: AWAY if 2 <= n <= 51 else b"1")
redis_clients.general = lambda **options: flaky


async def run():
    await watched_while(Connection(), lambda: flaky.reads <= 60)
    await asyncio.sleep(0.05)


asyncio.run(run())
print(json.dumps({"said": said, "reads": flaky.reads}))
"""
)


def test_an_outage_is_logged_once_not_at_every_look(redis_server, tmp_path) -> None:
    """The watcher looks four times a second: while Redis is away it said so at every look
    (a warning four times a second per process); now once an outage, and once when the
    version can be read again."""
    seen = django_script(redis_server.url, tmp_path, AWAY_ONCE)
    assert seen["reads"] > 51
    warnings = [text for level, text in seen["said"] if level == "WARNING"]
    assert len(warnings) == 1 and "tokens' version" in warnings[0], seen["said"]
    assert any("again" in text for level, text in seen["said"] if level == "INFO")


AWAY_AT_FIRST = (
    PREAMBLE
    + """


AWAY = redis.ConnectionError("Connection refused")
# Redis away at the watcher's first three looks; then the version 1, and 2 from the 20th
# read on (a token revoked)
flaky = Versions(lambda n: AWAY if n <= 3 else b"1" if n < 20 else b"2")
redis_clients.general = lambda **options: flaky


async def run():
    connection = Connection()
    watcher_died = lambda: security._watcher is not None and security._watcher.done()
    await watched_while(connection, lambda: flaky.reads <= 25 and not watcher_died())
    return connection.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""
)


def test_a_watcher_whose_first_look_finds_redis_away_goes_on_looking(
    redis_server, tmp_path
) -> None:
    """The first read of the tokens' version was outside the watcher's handling of Redis
    errors: with Redis away when the first connection of a process was watched (its token
    read from the database), the watcher died and no revocation closed it."""
    seen = django_script(redis_server.url, tmp_path, AWAY_AT_FIRST)
    assert seen["rechecks"] == 2  # at the first version read, and when it moved


EXIT_RACE = (
    PREAMBLE
    + """
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


async def run():
    first, second = Connection(), Connection()
    security.watch(first)
    security.unwatch(first)  # the watcher leaves at its next look
    await closing.wait()
    security.watch(second)  # while the leaving watcher closes its client
    version[0] = b"2"  # a token revoked
    await rechecked(second, every=0.01)
    security.unwatch(second)
    return second.rechecks


print(json.dumps({"rechecks": asyncio.run(run())}))
"""
)


def test_a_connection_watched_while_the_last_watcher_leaves_is_watched(
    redis_server, tmp_path
) -> None:
    """`watch` starts a watcher unless one runs; one that was leaving (nothing watched) but
    still closing its client counted as running, so the connection watched then was never
    checked again."""
    seen = django_script(redis_server.url, tmp_path, EXIT_RACE)
    assert seen["rechecks"] >= 1  # the new watcher checks it at its first look
