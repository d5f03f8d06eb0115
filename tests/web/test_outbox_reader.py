"""A consumer's OutboxReader (xumpweb/live/outbox.py) when its connection ends: the acks it
took must reach the router's inbox, whatever is in flight. And a filtering reader (a STOMP
`selector`) waits for a change of its outbox, not a poll (below).

The reader sends acks from a task of its own (gathering those that come while a send is in
flight); the consumer that ends calls `reader.close()` and then closes its Redis client
(SubscribeConsumer.stop in xumpweb/live/consumers.py): close() must wait for the send in
flight, never cancel it or leave it to a closed client. Found by
tests/web/test_end_to_end.py's disconnect test, which stalled once in a fresh-clone run and
once in 39 repeated runs here, with the first subscriber's 10 acked deliveries outstanding
for good: their confirm (and the removal of their tags from the taken set, in the same
pipeline) never reached Redis, and the web log said "cannot send 1 command(s) to the
router: Error UNKNOWN while writing to socket. Connection lost.".

The reader runs in a subprocess, with Django set up on the session's redis-server (the test
process does not set Django up), as a client only: no router reads the inbox meanwhile.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from tests.conftest import RedisServer
from tests.web.conftest import PYTHON, ROOT, _environment, django_script

ACK_THEN_LEAVE = """
import asyncio, json, os
import django
django.setup()
import redis.asyncio as aioredis
from xumpweb import runtime
from xumpweb.live.outbox import OutboxReader

runtime.client_only()  # nobody routes: the inbox keeps what the readers sent
found = runtime.service()


async def ack_then_leave(number: int, turns: int) -> str:
    # a client whose flush must connect first, as when the pool's idle connection was
    # closed by a command cancelled half-way (finish() cancels the presence task)
    client = aioredis.Redis.from_url(found.url)

    async def on_problem(detail: str) -> None:
        pass

    reader = OutboxReader(found, client, "leaving", on_problem)
    tag = f"leaving:1:{os.getpid()}.{number}"
    reader.unsettled[tag] = None  # taken and sent to the client, as the pump notes it
    await reader.ack([tag])  # the client's last ack frame, then the connection ends
    for _ in range(turns):  # the close comes at every point of the send in flight
        await asyncio.sleep(0)
    await reader.close()  # SubscribeConsumer.stop: the reader closes, then the client
    await client.aclose()
    return tag


async def main() -> None:
    tags = [await ack_then_leave(number, number % 16) for number in range(48)]
    inbox = [json.loads(item) for item in found.redis.lrange(found.keys["inbox"], 0, -1)]
    confirmed = {tag for c in inbox if c.get("op") == "confirm" for tag in c["tags"]}
    print(json.dumps({"acked": len(tags), "lost": [t for t in tags if t not in confirmed]}))


asyncio.run(main())
"""


def test_acks_sent_just_before_the_connection_ends_reach_the_inbox(redis_server, tmp_path):
    found = django_script(redis_server.url, tmp_path, ACK_THEN_LEAVE)
    assert found["acked"] == 48
    assert found["lost"] == [], f"{len(found['lost'])} of 48 acks never reached the inbox"


# -- a filtering consumer (a STOMP `selector` on a /queue/ subscription) ----------------------
# It reads the head of its outbox and takes only the items its filter wants; the others stay
# for the destination's other consumers. While the head holds none it wants, it must look
# again only when the outbox changes (SPEC §11: no poll a lone message waits for), and never
# sleep for good: a change by anyone (an append, a take, an item given back) or a lost
# connection makes it look. Its looks are counted in the private Redis's INFO commandstats
# (each look reads the head with one LRANGE; nothing else here sends one).
FILTERING = """
import asyncio, json, time
import django
django.setup()
import redis
from xumpweb import redis_clients, runtime
from xumpweb.live import outbox
from xumpweb.live.outbox import OutboxReader

runtime.client_only()  # nobody routes: only the test writes the outbox
# the last shard's client (with XUMP_SHARDS=4 on a cluster, the node serving its slot)
found = list(runtime.service().shards.values())[-1]
plain = found.redis
box = found.keys["outbox"] + "picky"
outbox.SCAN = SCAN_ITEMS


def item(tag: str, wanted: bool) -> bytes:  # as the router writes them: the tag first
    return json.dumps({"tag": tag, "wanted": wanted}, separators=(",", ":")).encode()


def looks() -> int:
    return plain.info("commandstats").get("cmdstat_lrange", {}).get("calls", 0)


async def until(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"waited 30 s for {what}"
        await asyncio.sleep(0.01)


async def main() -> None:
    client = redis_clients.for_store(found.store)

    async def on_problem(detail: str) -> None:
        pass

    reader = OutboxReader(found, client, "picky", on_problem,
                          wanted=lambda raw: b'"wanted":true' in raw)
    taken: list[bytes] = []

    async def pump() -> None:  # as a subscription's pump takes
        while True:
            try:
                taken.extend(await reader.take(10))
            except redis.RedisError:
                await asyncio.sleep(0.05)

    for tag in UNWANTED:
        plain.rpush(box, item(tag, False))
    for tag in BEYOND:
        plain.rpush(box, item(tag, True))
    plain.config_resetstat()
    task = asyncio.create_task(pump())
    await until(lambda: looks() >= 1, "the first look")
    found_out = {}
    SCENARIO
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await reader.close()
    await client.aclose()
    found_out["taken"] = [json.loads(raw)["tag"] for raw in taken]
    found_out["left"] = [json.loads(raw)["tag"] for raw in plain.lrange(box, 0, -1)]
    print(json.dumps(found_out))


asyncio.run(main())
"""


def filtering(directory, scenario: str, unwanted: list[str], beyond: list[str] = (),
              scan: int = 1000, cluster=None, single: str = "") -> dict:  # fmt: skip
    """Run FILTERING with `scenario` (the lines after the reader's first look, indented as
    main's body) on a redis-server of its own (so nothing else's commands are counted), or
    on the Redis Cluster `cluster` with 4 shards (its reader on the last shard's node;
    `single`: a single server's URL, for Celery and Channels, which the script never uses)."""
    lines = textwrap.indent(textwrap.dedent(scenario).strip(), "    ")[4:]
    code = (
        FILTERING.replace("SCENARIO", lines)
        .replace("SCAN_ITEMS", str(scan))
        .replace("UNWANTED", repr(unwanted))
        .replace("BEYOND", repr(list(beyond)))
    )
    (directory / "service").mkdir()
    if cluster is not None:
        env = _environment(cluster.node_urls[0], directory / "service", "inline")
        env.update(XUMP_REDIS_CLUSTER="true", XUMP_SHARDS="4", XUMP_BROKER_URL=single,
                   XUMP_CHANNELS_URL=single)  # fmt: skip
        ran = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert ran.returncode == 0, f"the script did not run: {ran.stderr[-3000:]}"
        return json.loads(ran.stdout.strip().splitlines()[-1])
    (directory / "redis").mkdir()
    server = RedisServer(directory / "redis")
    server.start()
    try:
        return django_script(server.url, directory / "service", code)
    finally:
        server.stop()


@pytest.fixture(params=["server", "cluster"])
def where(request, redis_server) -> dict:
    """Where FILTERING runs: a redis-server of its own, or the session's Redis Cluster with
    4 shards (the outbox on the last shard's node: tracking is per node)."""
    if request.param == "server":
        return {}
    return {"cluster": request.getfixturevalue("redis_cluster"), "single": redis_server.url}


def test_a_filtering_reader_looks_again_only_when_its_outbox_changes(tmp_path, where):
    found = filtering(tmp_path, """
        plain.config_resetstat()
        await asyncio.sleep(2.5)  # nothing changes: any look now is a poll
        found_out["idle_looks"] = looks()
        plain.config_resetstat()
        plain.rpush(box, item("w1", True))  # wanted, behind the unwanted one
        await until(lambda: taken, "the wanted item")
        found_out["looks_to_take"] = looks()
    """, unwanted=["u1"], **where)  # fmt: skip
    # at most one safety look a second (against a wake-up lost), not ten polls a second
    assert found["idle_looks"] <= 3, f"{found['idle_looks']} looks in 2.5 s of no change"
    assert found["taken"] == ["w1"]
    assert found["looks_to_take"] <= 2
    assert found["left"] == ["u1"]  # left in place for the destination's other consumers


def test_a_filtering_reader_looks_again_when_others_take_or_give_back_items(tmp_path):
    # it reads two items of the head: the wanted w1 is beyond them until a competing
    # consumer takes u1; then a consumer that ends gives w2 back to the head (UNTAKE)
    found = filtering(tmp_path, """
        plain.lpop(box)  # u1, taken by a competing consumer
        await until(lambda: taken, "w1, now in the head it reads")
        plain.lpush(box, item("w2", True))  # given back by a consumer that ended
        await until(lambda: len(taken) == 2, "w2, given back")
    """, unwanted=["u1", "u2"], beyond=["w1"], scan=2)  # fmt: skip
    assert found["taken"] == ["w1", "w2"]
    assert found["left"] == ["u2"]


def test_a_filtering_reader_whose_connection_ends_while_it_waits_looks_again(tmp_path):
    found = filtering(tmp_path, """
        plain.client_kill_filter(_type="normal", skipme=True)  # as a restart ends them
        plain.rpush(box, item("w1", True))
        await until(lambda: taken, "the wanted item after the connection ended")
    """, unwanted=["u1"])  # fmt: skip
    assert found["taken"] == ["w1"]
    assert found["left"] == ["u1"]
