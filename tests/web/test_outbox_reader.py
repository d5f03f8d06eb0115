"""A consumer's OutboxReader (xumpweb/live/outbox.py) when its connection ends: the acks it
took must reach the router's inbox, whatever is in flight.

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

from tests.web.conftest import django_script

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
