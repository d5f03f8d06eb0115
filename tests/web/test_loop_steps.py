"""Steps made on the event loop of the process that routes (SPEC §11's co-located path,
runtime.Router.apply_here; engine/relay's package doc, "Deferred commits"): what must hold
when something fails around them. Found by an adversarial review (2026-11-28); each test
failed before its fix.

Each runs in a process of its own with Django set up (the test process never sets it up),
as tests/web/test_outbox_reader.py's do: a router of the script's store built by hand (no
catalog, no lease watch), registered as the one that takes this process's handoffs.
"""

from __future__ import annotations

import pytest

from tests.web.conftest import django_script

pytestmark = pytest.mark.slow

ROUTER = """
import asyncio, json, os, threading, time
from collections import deque
import django
django.setup()
import redis
from django.conf import settings
from engine import Engine, Message
from engine.relay import Handed, RelayClient
from xumpweb import redis_clients, runtime

URL, NAME = settings.XUMP_REDIS_URL, settings.XUMP_STORE
engine = Engine()
engine.store_create("redis", NAME, url=URL)
engine.set_default_store(NAME)
relay = runtime._RelayRouter(engine, NAME, name="test", lease_ms=5000)
assert relay.acquire(timeout=5)
relay.recent = deque(maxlen=50)
relay.journal_key = f"xump:{{{NAME}}}:journal"
relay.journal_limit = 1000
relay.wiring_key = f"xump:{{{NAME}}}:wiring"
engine.queue_create("q")
engine.selector_create("q").when_always().do_deliver("app").enable()
router = runtime.Router(URL, NAME, 5000, 60.0)
router.relay = relay
runtime._taking_handoffs[NAME] = router
client = RelayClient(URL, NAME)
version = str(relay.wiring_version).encode()


def handed(body):
    return Handed.publishing("q", client.stamped([Message(body=body)]))
"""

LEAN_FAILS_BEFORE_THE_STEP = (
    ROUTER
    + """
real = redis_clients.shared_lean
calls = []


def flaky(store):
    calls.append(store)
    if len(calls) == 1:  # a cluster's node lookup failing on first use, say
        raise redis.ConnectionError("no connection")
    return real(store)


redis_clients.shared_lean = flaky


async def main():
    first = handed(b"one")
    answer = await router.apply_here([first], version)
    owned = engine._lock._is_owned()
    second = handed(b"two")
    step = await router.apply_here([second], version)
    got = client.deliveries("app", count=10, wait=1)
    took = engine._lock.acquire(timeout=5)  # as the router thread would
    print(json.dumps({
        "first": answer, "first_committed": first.committed, "owned_after": owned,
        "second_committed": second.committed, "delivered": [d.message.body.decode() for d in got],
        "thread_gets_lock": took,
    }))


asyncio.run(main())
"""
)


def test_a_step_that_cannot_get_its_connection_is_not_made(redis_server, tmp_path) -> None:
    """The loop's connection failing before the step leaves no lock held and nothing told
    durable: the publish goes its other way (NOT_HERE), and the next step is made."""
    found = django_script(redis_server.url, tmp_path, LEAN_FAILS_BEFORE_THE_STEP)
    assert found["first"] == "not here" and not found["first_committed"]
    assert not found["owned_after"]
    assert found["second_committed"] and found["delivered"] == ["two"]
    assert found["thread_gets_lock"]


LOOP_NEVER_WAITS_FOR_THE_LOCK = (
    ROUTER
    + """
def router_thread(stop, result):
    # as the router thread: wants the engine's lock while the loop's step holds it (its
    # commit on its way), gets it when the loop lets go, and keeps it until the event loop
    # shows it runs on (or 10 s)
    while not stop.is_set():
        if engine._lock.acquire(blocking=False):  # the loop's step does not hold it yet
            engine._lock.release()
            time.sleep(0.0001)
            continue
        with engine._lock:  # blocks until the loop's commit came back
            result["caught"] = True
            result["loop_ran"] = loop_ran.wait(10)
        return


async def main():
    global loop_ran
    caught = ran = 0
    for _ in range(20):  # until the thread has come for the lock during a commit
        loop_ran, stop, result = threading.Event(), threading.Event(), {}
        thread = threading.Thread(target=router_thread, args=(stop, result))
        thread.start()
        await asyncio.sleep(0.002)
        step = await router.apply_here([handed(b"m")], version)
        await asyncio.sleep(0)
        loop_ran.set()  # the loop runs on: unless it waited for the thread's lock above
        stop.set()
        await asyncio.to_thread(thread.join)
        if result.get("caught"):
            caught += 1
            ran += result["loop_ran"]
            if caught >= 3:
                break
    print(json.dumps({"caught": caught, "loop_ran": ran}))


asyncio.run(main())
"""
)


def test_the_event_loop_never_waits_for_the_engines_lock(redis_server, tmp_path) -> None:
    """After a step's commit came back the loop lets the engine's lock go; the router
    thread, which was waiting for it, takes it for its own step. The loop then asked the
    engine (holds_for_settlements) whether to wake the thread, which waits for the lock:
    the whole event loop stood still for the thread's step."""
    found = django_script(redis_server.url, tmp_path, LOOP_NEVER_WAITS_FOR_THE_LOCK)
    assert found["caught"] >= 1, "the thread never came for the lock during a commit"
    assert found["loop_ran"] == found["caught"]


KEEPS_ACKS = (
    ROUTER
    + """
import redis.asyncio as aioredis
from xumpweb.live.lean_redis import LeanRedis
from xumpweb.live.outbox import OutboxReader


async def main():
    found = runtime.Service(URL, NAME, "worker", 10.0)

    async def problem(detail):
        pass

    reader = OutboxReader(found, aioredis.Redis.from_url(URL), "app", problem)
    reader.claimed = [b'{"tag":"q:1:x.1"}']  # a claim handed on, not stamped yet
    reader.unsent = [{"op": "confirm", "tags": ["q:1:older.1"]}]  # kept from an outage
    reader.lean = LeanRedis("redis://127.0.0.1:1/0", timeout=None)  # no connection can be made
    reader.unsettled["q:1:x.1"] = None
    await reader.ack(["q:1:x.1"])
    await reader.flush_acks()
    kept = [tag for command in reader.unsent for tag in command["tags"]]
    resending = reader.resend_task is not None
    reader.closed = True
    if reader.resend_task is not None:
        reader.resend_task.cancel()
    print(json.dumps({"kept": kept, "resending": resending}))


asyncio.run(main())
"""
)


def test_acks_whose_stamp_cannot_be_sent_are_kept_and_sent_again(redis_server, tmp_path) -> None:
    """A co-located reader sends the stamps due ahead of its settlements' step: when that
    connection cannot be made (Redis restarting), the acks (and those kept from before)
    stay to be sent again, as on the inbox's way; they were dropped."""
    found = django_script(redis_server.url, tmp_path, KEEPS_ACKS)
    assert found["kept"] == ["q:1:older.1", "q:1:x.1"]
    assert found["resending"]
