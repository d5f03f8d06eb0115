"""The settlements of ack:auto claims ride with the next step (xumpweb/runtime.py,
_RelayRouter.run_once): found alone, they wait up to `settle_later` seconds for other work;
the next publish's step applies them first, in its one commit, so the credit they give
back serves that publish at once; while a queue holds a message (for their credit,
maybe) they are applied at once. In a subprocess with Django set up (the test process
does not set Django up); the deferral is an hour there, so nothing depends on a clock."""

from __future__ import annotations

from tests.web.conftest import django_script

# a router of its own store (settlements wait an hour: nothing depends on a clock) and a
# queue "q" with nothing wired yet, in a process with Django set up
ROUTER = """
import json, uuid
from collections import deque
import django
django.setup()
import redis
from django.conf import settings
from engine import Engine, Message
from engine.relay import RelayClient, delivery_keys, relay_keys
from xumpweb.analytics.journal import journal_key
from xumpweb.runtime import _RelayRouter

store = f"s{uuid.uuid4().hex[:8]}"
engine = Engine(journal=True)
engine.store_create("redis", store, url=settings.XUMP_REDIS_URL)
engine.set_default_store(store)
router = _RelayRouter(engine, store, name="test", lease_ms=60_000)
router.recent = deque(maxlen=10)
router.journal_key, router.journal_limit = journal_key(store), 1000
router.wiring_key = f"xump:{{{store}}}:wiring"
router.settle_later = 3600.0
assert router.acquire(timeout=10)
engine.queue_create("q")
"""

RIDE_ALONG = (
    ROUTER
    + """
engine.selector_create("q").when_always().do_deliver("app").set_credit(2).enable()
client = RelayClient(settings.XUMP_REDIS_URL, store)
server = redis.Redis.from_url(settings.XUMP_REDIS_URL)
outbox, autoacked = relay_keys(store)[1] + "app", delivery_keys(store)["autoacked"]
seen = {}

client.publish_many("q", [Message(body=b"one"), Message(body=b"two")])
seen["first step"] = router.run_once()
for _ in range(2):  # an ack:auto consumer's claims: its acks
    server.blmove(outbox, autoacked, 1, "LEFT", "RIGHT")
steps = router.steps
seen["alone"] = router.run_once()  # the settlements alone: they wait
stats = engine.stats("q")
seen["after alone"] = [stats["confirmed"], stats["outstanding"], server.llen(autoacked),
                       router.steps - steps, router.settle_due is not None]
client.publish("q", Message(body=b"three"))  # credit 2 is all held: it needs theirs
seen["with a publish"] = router.run_once()
stats = engine.stats("q")
seen["after"] = [stats["confirmed"], stats["outstanding"], server.llen(autoacked),
                 router.steps - steps, router.settle_due is None]
seen["delivered"] = [d.message.body.decode() for d in client.deliveries("app", count=10)]
client.publish("q", Message(body=b"four"))
router.run_once()
router.settle_later = 0.0  # due at once: a step of settlements alone
server.blmove(outbox, autoacked, 1, "LEFT", "RIGHT")
seen["due"] = router.run_once()
stats = engine.stats("q")
seen["after due"] = [stats["confirmed"], stats["outstanding"], server.llen(autoacked)]

# a message held in a queue for credit: a settlement found alone is applied at once
router.settle_later = 3600.0
engine.queue_create("h")
engine.selector_create("h").when_always().do_deliver("held").set_credit(1).enable()
held = relay_keys(store)[1] + "held"
client.publish_many("h", [Message(body=b"first"), Message(body=b"second")])
router.run_once()
seen["held before"] = [server.llen(held), engine.stats("h")["outstanding"]]
server.blmove(held, autoacked, 1, "LEFT", "RIGHT")
seen["held settles"] = router.run_once()
seen["held after"] = [server.llen(held), engine.stats("h")["confirmed"]]
client.close()
router.store.release_lease()
print(json.dumps(seen))
"""
)


def test_settlements_found_alone_wait_and_ride_with_the_next_publish(redis_server, tmp_path):
    seen = django_script(redis_server.url, tmp_path, RIDE_ALONG)
    assert seen["first step"] == 1  # one publish command of two messages
    # alone: no step, nothing settled, the claims still on the autoacked list
    assert seen["alone"] == 0
    assert seen["after alone"] == [0, 2, 2, 0, True]
    # the next publish's one step settles them first, then routes it with their credit
    assert seen["with a publish"] == 3
    assert seen["after"] == [2, 1, 0, 1, True]
    assert seen["delivered"] == ["three"]
    # once due, settlements alone are a step of their own
    assert seen["due"] == 1
    assert seen["after due"] == [3, 1, 0]  # "three" was taken, not claimed: outstanding
    # "second" waits in its queue for the credit "first" holds: its settlement goes at
    # once, and "second" is delivered in the same step
    assert seen["held before"] == [1, 1]
    assert seen["held settles"] == 1
    assert seen["held after"] == [1, 1]


LOOKS_AFTER = (
    ROUTER
    + """
engine.selector_create("q").when_always().do_deliver("app").set_credit(1).enable()
server = redis.Redis.from_url(settings.XUMP_REDIS_URL)
rings = server.pubsub()
rings.subscribe("bell")
while rings.get_message(timeout=10) is None:
    pass  # its confirmation: the subscription is in place before anything rings
client = RelayClient(settings.XUMP_REDIS_URL, store)
client.ring = "bell"
outbox, autoacked = relay_keys(store)[1] + "app", delivery_keys(store)["autoacked"]
seen = {}

def hear(count):
    heard = 0
    while heard < count:
        ring = rings.get_message(timeout=10)
        if ring is not None and ring["type"] == "message":
            assert router.heard(ring["data"])
            heard += 1

seen["first look"] = [router.run_once(), router.looks_after(0, False)]
client.publish("q", Message(body=b"one"))
hear(1)
done = router.run_once(head=False)  # what the ring carried: nothing read
seen["alone"] = [done, router.looks_after(done, False), server.llen(outbox)]
server.blmove(outbox, autoacked, 1, "LEFT", "RIGHT")  # an ack:auto consumer's claim
client.publish_many("q", [Message(body=b"two"), Message(body=b"three")])
hear(1)
done = router.run_once(head=False)  # "one"'s credit is held by its claim: both wait
seen["held"] = [done, router.looks_after(done, False), server.llen(outbox),
                engine.stats("q")["depth"]]
done = router.run_once(head=True)  # the look finds the claim, settles it, delivers "two"
seen["looked"] = [done, engine.stats("q")["confirmed"], server.llen(outbox),
                  router.looks_after(done, False)]
client.close()
router.store.release_lease()
print(json.dumps(seen))
"""
)


def test_a_router_looks_for_claims_after_a_step_that_leaves_a_message_waiting(
    redis_server, tmp_path
):
    """ack:auto consumers ring nobody for their claims: after a step of what rings carried,
    the router reads nothing unless a queue still holds a message (it may wait for a
    claim's credit); then it looks, finds the claim and routes the message with its
    credit. (Its periodic look, CLAIMS_LOOK, is the other way claims are found.)"""
    seen = django_script(redis_server.url, tmp_path, LOOKS_AFTER)
    assert seen["first look"] == [0, False]
    assert seen["alone"] == [1, False, 1]  # delivered; nothing left: no look
    assert seen["held"] == [1, True, 0, 2]  # nothing delivered, two held: look
    assert seen["looked"] == [1, 1, 1, True]  # settled, "two" out, "three" still held
