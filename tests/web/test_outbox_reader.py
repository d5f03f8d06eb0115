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
# What both scripts below start with: Django, the last shard's client (with XUMP_SHARDS=4
# on a cluster, the node serving its slot), the looks counted, a wait for a condition.
SCRIPT_HEAD = """
import asyncio, json, time
import django
django.setup()
import redis
from xumpweb import redis_clients, runtime
from xumpweb.live import head_view, outbox
from xumpweb.live.outbox import OutboxReader

runtime.client_only()  # nobody routes: only the test writes the outbox
found = list(runtime.service().shards.values())[-1]
plain = found.redis
head_view.SCAN = SCAN_ITEMS  # the view reads the head


def looks() -> int:
    return plain.info("commandstats").get("cmdstat_lrange", {}).get("calls", 0)


async def until(check, what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"waited {within:g} s for {what}"
        await asyncio.sleep(0.005)
"""

FILTERING = (
    SCRIPT_HEAD
    + """
box = found.keys["outbox"] + "picky"


def item(tag: str, wanted: bool) -> bytes:  # as the router writes them: the tag first
    return json.dumps({"tag": tag, "wanted": wanted}, separators=(",", ":")).encode()

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
)


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
    return _run(directory, code, cluster, single)


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


# -- many filtering consumers of one destination in one process ---------------------------------
# They share one view of the outbox's head (xumpweb/live/outbox.py, "Filtering consumers"): one
# connection tracking the key, one look a change for all of them, so their cost grows with
# changes, not with readers times changes. Each reader's items are tagged with the number of the
# reader that wants them. Looks are counted as above (LRANGEs); the view's connection is the
# one with tracking on (CLIENT LIST's flag `t`). POP_WAIT is long here, so that every look
# counted is a change's, not the fallback's.
SHARED = (
    SCRIPT_HEAD
    + """
box = found.keys["outbox"] + "shared"
outbox.POP_WAIT = head_view.POP_WAIT = 30.0  # no fallback look: each look is a change's


def item(tag: str, owner) -> bytes:  # as the router writes them: the tag first
    return json.dumps({"tag": tag, "for": owner}, separators=(",", ":")).encode()


def tracking() -> int:  # connections with CLIENT TRACKING on
    return sum("t" in client["flags"] for client in plain.client_list())

async def main() -> None:
    client = redis_clients.for_store(found.store)
    readers, pumps, taken = {}, {}, {}
    baseline = tracking()

    async def on_problem(detail: str) -> None:
        pass

    def start(number: int, wants=None) -> None:
        wants = f'"for":{number}}}' if wants is None else wants
        reader = OutboxReader(found, client, "shared", on_problem,
                              wanted=lambda raw, wants=wants.encode(): wants in raw)
        readers[number], taken[number] = reader, []

        async def pump() -> None:  # as a subscription's pump takes, until it stops
            while not reader.stopping:
                try:
                    taken[number].extend(await reader.take(10))
                except redis.RedisError:
                    await asyncio.sleep(0.05)

        pumps[number] = asyncio.create_task(pump())

    async def stop(number: int) -> None:  # as a subscription ends
        await readers.pop(number).stop(pumps.pop(number), None)

    def tags(number: int) -> list[str]:
        return [json.loads(raw)["tag"] for raw in taken[number]]

    async def three_with_their_first_items() -> None:  # readers 0-2, an item each taken
        for number in range(3):
            start(number)
        for number in range(3):
            plain.rpush(box, item(f"a{number}", number))
        await until(lambda: all(taken[number] for number in range(3)), "the first items")

    found_out = {}
    SCENARIO
    for number in list(readers):
        await stop(number)
    await client.aclose()
    found_out["taken"] = {number: tags(number) for number in taken}
    found_out["left"] = [json.loads(raw)["tag"] for raw in plain.lrange(box, 0, -1)]
    found_out["tasks_left"] = len(asyncio.all_tasks()) - 1
    # the last reader's end closes the view's connection (its server sees it shortly after)
    await until(lambda: tracking() == baseline, "the tracking connection to close")
    print(json.dumps(found_out))


asyncio.run(main())
"""
)


def shared(directory, scenario: str, scan: int = 1000, where: dict | None = None) -> dict:
    """Run SHARED with `scenario` (main's body, after the helpers) as `filtering` runs
    FILTERING: on a redis-server of its own, or on the Redis Cluster of `where`."""
    lines = textwrap.indent(textwrap.dedent(scenario).strip(), "    ")[4:]
    code = SHARED.replace("SCENARIO", lines).replace("SCAN_ITEMS", str(scan))
    return _run(directory, code, **(where or {}))


def _run(directory, code: str, cluster=None, single: str = "") -> dict:
    """Run a script of this file on a redis-server of its own, or on the Redis Cluster
    `cluster` with 4 shards; the JSON object its last printed line holds."""
    (directory / "service").mkdir()
    if cluster is not None:
        env = _environment(cluster.node_urls[0], directory / "service", "inline")
        env.update(XUMP_REDIS_CLUSTER="true", XUMP_SHARDS="4", XUMP_BROKER_URL=single,
                   XUMP_CHANNELS_URL=single)  # fmt: skip
        ran = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=180)  # fmt: skip
        assert ran.returncode == 0, f"the script did not run: {ran.stderr[-3000:]}"
        return json.loads(ran.stdout.strip().splitlines()[-1])
    (directory / "redis").mkdir()
    server = RedisServer(directory / "redis")
    server.start()
    try:
        return django_script(server.url, directory / "service", code)
    finally:
        server.stop()


def test_filtering_readers_of_one_outbox_share_one_look_a_change_however_many(tmp_path, where):
    # 20 readers, each wanting its own items; 40 items appended one at a time, each taken
    # before the next comes: 80 changes (an append and a take each)
    found = shared(tmp_path, """
        for number in range(20):
            start(number)
        for number in range(20):  # each reader's first item: every one has looked
            plain.rpush(box, item(f"a{number}", number))
        await until(lambda: all(taken[number] for number in range(20)), "the first items")
        found_out["tracking"] = tracking() - baseline
        plain.config_resetstat()
        for k in range(40):
            number = k * 7 % 20
            plain.rpush(box, item(f"b{k}", number))
            await until(lambda: f"b{k}" in tags(number), f"b{k}")
        found_out["looks"] = looks()
    """, where=where)  # fmt: skip
    assert found["tracking"] == 1, f"{found['tracking']} connections track the outbox"
    # a look a change for all of them (the append's, the one sent with the take), not one
    # a reader: 20 readers looking at each change would make about 1,600
    assert found["looks"] <= 3 * 40, f"{found['looks']} looks for 40 items"
    for number in range(20):  # each item once, to the reader that wants it, in order
        mine = [f"b{k}" for k in range(40) if k * 7 % 20 == number]
        assert found["taken"][str(number)] == [f"a{number}", *mine]
    assert found["left"] == []
    assert found["tasks_left"] == 0


def test_a_filtering_reader_that_stops_leaves_the_view_to_the_others(tmp_path):
    found = shared(tmp_path, """
        await three_with_their_first_items()
        await stop(0)
        found_out["tracking"] = tracking() - baseline  # still one: the others read on
        for number in range(3):
            plain.rpush(box, item(f"late{number}", number))
        await until(lambda: len(taken[1]) == len(taken[2]) == 2, "the others' late items")
    """)  # fmt: skip
    assert found["tracking"] == 1
    assert found["taken"] == {"0": ["a0"], "1": ["a1", "late1"], "2": ["a2", "late2"]}
    assert found["left"] == ["late0"]  # its reader is gone: left for the next consumer
    assert found["tasks_left"] == 0  # and once the last stopped, its connection closed


def test_filtering_readers_wanting_the_same_items_receive_each_once_in_order(tmp_path):
    found = shared(tmp_path, """
        start(0, wants='"for":"both"')
        start(1, wants='"for":"both"')
        for k in range(30):  # 30 changes, as fast as they come
            plain.rpush(box, item(f"m{k:02}", "both"))
        await until(lambda: len(taken[0]) + len(taken[1]) >= 30, "30 items")
    """)  # fmt: skip
    first, second = found["taken"]["0"], found["taken"]["1"]
    assert sorted(first + second) == [f"m{k:02}" for k in range(30)]  # each exactly once
    assert first == sorted(first) and second == sorted(second)
    assert found["left"] == []


def test_a_filtering_reader_whose_take_lets_anothers_item_into_the_head_wakes_it(tmp_path):
    # the head read is two items, both reader 0's; reader 1's item is behind them: only
    # reader 0's take (no other connection changes the outbox) brings it into the head
    found = shared(tmp_path, """
        plain.rpush(box, item("a1", 0), item("a2", 0), item("b1", 1))
        start(1)
        await until(lambda: looks() >= 1, "reader 1's first look")
        start(0)
        await until(lambda: taken[1], "reader 1's item, behind reader 0's")
    """, scan=2)  # fmt: skip
    assert found["taken"] == {"0": ["a1", "a2"], "1": ["b1"]}


def test_filtering_readers_joining_while_items_come_miss_none(tmp_path):
    # reader 0's items keep coming (so looks are in flight) while readers 1-10 join, each
    # sent one item at once
    found = shared(tmp_path, """
        start(0)
        for number in range(1, 11):
            plain.rpush(box, item(f"z{number}", 0))
            start(number)
            plain.rpush(box, item(f"j{number}", number))
            await asyncio.sleep(0)
        await until(lambda: all(taken[number] for number in range(1, 11)), "the joiners'")
        await until(lambda: len(taken[0]) == 10, "reader 0's")
    """)  # fmt: skip
    assert found["taken"]["0"] == [f"z{number}" for number in range(1, 11)]
    for number in range(1, 11):
        assert found["taken"][str(number)] == [f"j{number}"]
    assert found["left"] == []


def test_filtering_readers_sharing_a_view_whose_connection_ends_all_look_again(tmp_path):
    found = shared(tmp_path, """
        await three_with_their_first_items()
        plain.client_kill_filter(_type="normal", skipme=True)  # as a restart ends them
        for number in range(3):
            plain.rpush(box, item(f"late{number}", number))
        await until(lambda: all(len(taken[number]) == 2 for number in range(3)), "the rest")
    """)  # fmt: skip
    assert found["taken"] == {str(n): [f"a{n}", f"late{n}"] for n in range(3)}
    assert found["left"] == []
