"""The consumers registry (xumpweb/live/registry.py) through /api/consumers: subscribers of
the JSON WebSocket appear with what they are and hold, leave when they go, and close when
an operator asks, their unsettled deliveries going back."""

from __future__ import annotations

import pytest
from websockets.exceptions import ConnectionClosed

from tests.web.conftest import django_script, unique
from tests.web.test_subscribe import issue_token, receive, send, subscribe, take, wait_for, xump

__all__ = ["xump"]  # the fixture


def listed(http, destination: str) -> list[dict]:
    answer = http.get("/api/consumers")
    assert answer.status_code == 200, answer.text
    return [c for c in answer.json()["consumers"] if c["destination"] == destination]


def test_a_subscriber_is_listed_with_what_it_holds_and_leaves_when_it_goes(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        found = wait_for(lambda: listed(xump.http, destination))
        assert len(found) == 1
        one = found[0]
        assert one["transport"] == "websocket-json"
        assert one["who"].startswith("token:")
        assert one["remote"].startswith("127.0.0.1:")
        assert one["in_flight"] == 0 and one["credit"] == 0
        send(socket, {"type": "credit", "n": 10})
        xump.publish(queue, ["a", "b", "c"])
        got = take(socket, 3)
        assert wait_for(lambda: [c for c in listed(xump.http, destination)
                                 if c["in_flight"] == 3 and c["credit"] == 7])  # fmt: skip
        send(socket, {"type": "ack", "tags": [d["tag"] for d in got]})
        assert wait_for(lambda: [c for c in listed(xump.http, destination)
                                 if c["in_flight"] == 0 and c["acked"] == 3])  # fmt: skip
    assert wait_for(lambda: not listed(xump.http, destination))


def test_the_feeds_say_which_destinations_a_queue_delivers_to_and_who_listens(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)

    def feed() -> dict:
        feeds = xump.http.get("/api/consumers").json()["feeds"]
        return next(f for f in feeds if f["queue"] == queue)

    assert feed()["destination"] == destination and feed()["listeners"] == 0
    with subscribe(service, destination):
        assert wait_for(lambda: feed()["listeners"] == 1)
    assert wait_for(lambda: feed()["listeners"] == 0)


def test_an_operator_closes_a_subscriber_and_its_deliveries_go_back(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 5})
        mids = xump.publish(queue, ["a", "b"])
        take(socket, 2)
        connection = wait_for(lambda: listed(xump.http, destination))[0]["id"]
        answer = xump.http.delete(f"/api/consumers/{connection}")
        assert answer.status_code == 200, answer.text
        frames = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(receive(socket))
        assert closed.value.rcvd.code == 4000
        assert any(f.get("error") == "closed_by_operator" for f in frames)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 5})
        again = take(socket, 2)
    assert [d["message"]["mid"] for d in again] == mids
    assert all(d["redelivered"] for d in again)
    assert xump.http.delete(f"/api/consumers/{connection}").status_code == 404
    audit = service.manage("shell", "-c", "from xumpweb.wiring.models import AuditEvent\n"
                           f"print(AuditEvent.objects.filter(action='consumer.close', "
                           f"subject={destination!r}).count())")  # fmt: skip
    assert audit.stdout.strip().splitlines()[-1] == "1"


def test_closing_needs_manage_on_the_destination_and_a_real_id(service, xump):
    destination = unique("d")
    reader = issue_token(service, {"*": ["read"]})
    with subscribe(service, destination), service.client(reader) as http:
        connection = wait_for(lambda: listed(xump.http, destination))[0]["id"]
        assert listed(http, destination)  # a reader sees it...
        refused = http.delete(f"/api/consumers/{connection}")
        assert refused.status_code == 403, refused.text  # ...and may not close it
        assert listed(xump.http, destination)
        for bad in ("nope", "0123456789abcdef", "../x"):
            assert xump.http.delete(f"/api/consumers/{bad}").status_code == 404


def test_subscribers_of_another_web_process_are_listed_closed_and_gone_when_it_dies(service, xump):
    """The registry is in Redis: this process lists and closes another's subscribers, and
    those of a process killed -9 (no chance to say so) leave by themselves."""
    elsewhere = service.start_web("consumers-web")
    second = elsewhere.processes["server"]
    try:
        closed_one, killed_one = unique("d"), unique("d")
        with subscribe(elsewhere, closed_one) as socket, subscribe(elsewhere, killed_one):
            found = wait_for(lambda: listed(xump.http, closed_one))
            assert found[0]["pid"] == second.pid
            assert xump.http.delete(f"/api/consumers/{found[0]['id']}").status_code == 200
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    receive(socket)
            assert closed.value.rcvd.code == 4000
            assert wait_for(lambda: not listed(xump.http, closed_one))
            assert listed(xump.http, killed_one)
            second.kill()
            second.wait()
            assert wait_for(lambda: not listed(xump.http, killed_one))
    finally:
        elsewhere.stop("server", kill=True)


ACKS_AFTER_THE_CLIENT_WENT = """
import asyncio, json
import django
django.setup()
from xumpweb.live.consumers import SubscribeConsumer


class Reader:  # records the settlements the consumer hands its outbox reader
    def __init__(self):
        self.acked = []
        self.unsettled = {"t1": None, "t2": None}

    async def ack(self, tags):
        self.acked.extend(tags)
        return []


consumer = SubscribeConsumer()
consumer.closed, consumer.finished, consumer.authorized = True, False, True
consumer.reader, consumer.credit = Reader(), 0
seen = {}


async def receive(frame):
    await consumer.websocket_receive({"text": json.dumps(frame)})


asyncio.run(receive({"type": "ack", "tags": ["t1", "t2"]}))
seen["acked_while_closed"] = list(consumer.reader.acked)
asyncio.run(receive({"type": "credit", "n": 10}))
seen["credit_while_closed"] = consumer.credit
consumer.finished = True
asyncio.run(receive({"type": "ack", "tags": ["t3"]}))
seen["acked_after_finish"] = list(consumer.reader.acked)
print(json.dumps(seen))
"""


def test_acks_that_came_before_the_client_went_are_applied_after_a_send_saw_it_gone(
    redis_server, tmp_path
):
    """The client acks and closes at once; the server's pump finds the connection gone (a
    send fails: `closed`) before the ack frame's turn comes, then the disconnect gives
    back what is unsettled. The ack must still be applied first: ignoring it gave those
    deliveries again to the destination's other subscriber (a fault-suite run: 50
    unexplained duplicates). Other frames of a client that is gone are not obeyed, and
    nothing is once the connection is finished. (In a subprocess with Django set up.)"""
    seen = django_script(redis_server.url, tmp_path, ACKS_AFTER_THE_CLIENT_WENT)
    assert seen == {"acked_while_closed": ["t1", "t2"], "credit_while_closed": 0,
                    "acked_after_finish": ["t1", "t2"]}  # fmt: skip
