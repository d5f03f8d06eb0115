"""The group commit's batches (xumpweb/live/group_commit.py's Gathered): in order, at
most `batch_max` each. A defect inside it (an exception that is no refusal) is told to
every publish of its batch as an internal error, which each door answers as one: HTTP 500
internal_error, a WebSocket error frame `internal_error`, a STOMP ERROR "internal error".
Before, it was a bare XumpError, which the doors answered 400 invalid_request, as if the
client had erred.

The check runs in a subprocess with Django set up (the test process does not set Django
up, as in test_outbox_reader.py); it touches no Redis.
"""

from __future__ import annotations

from tests.web.conftest import django_script

DEFECT = """
import asyncio, json
import django
django.setup()
from xumpweb.api.errors import engine_error_response
from xumpweb.live.group_commit import Gathered, Pending
from xumpweb.live.publish import error_frame
from xumpweb.stompgate.session import _error_message


class Told(Pending):
    error = None

    def done(self):
        self.finished = True

    def fail(self, error):
        self.finished = True
        self.error = error


class Broken(Gathered):
    async def send(self, batch):
        raise KeyError("a defect")


async def run():
    gathered = Broken()
    items = [Told("q", []), Told("q", [])]
    gathered.submit_all(items)
    await gathered.task
    return items


items = asyncio.run(run())
response = engine_error_response(items[0].error)
print(json.dumps({
    "errors": [f"{type(item.error).__name__}: {item.error}" for item in items],
    "http": [response.status_code, json.loads(response.content)["error"]],
    "websocket": json.loads(error_frame(7, items[0].error))["error"],
    "stomp": _error_message(items[1].error),
}))
"""


def test_a_defect_in_the_group_commit_is_an_internal_error_at_every_door(
    redis_server, tmp_path
) -> None:
    told = django_script(redis_server.url, tmp_path, DEFECT)
    assert told["errors"] == ["InternalError: internal error (KeyError); see the server log"] * 2
    assert told["http"] == [500, "internal_error"]
    assert told["websocket"] == "internal_error"
    assert told["stomp"] == "internal error"


BATCHES = """
import asyncio, json
import django
django.setup()
from xumpweb.live.group_commit import Gathered, Pending


class Told(Pending):
    def done(self):
        self.finished = True


class Recorded(Gathered):
    batch_max = 1000

    def __init__(self):
        super().__init__()
        self.sent = []

    async def send(self, batch):
        self.sent.append([item.queue for item in batch])
        if len(self.sent) == 1:  # publishes that come while the first batch is on its way
            self.submit_all([Told(f"late-{n}", []) for n in range(3)])
        await asyncio.sleep(0)
        for item in batch:
            item.done()


async def run():
    gathered = Recorded()
    gathered.submit_all([Told(f"q-{n}", []) for n in range(2500)])
    await gathered.task
    return gathered.sent


print(json.dumps(asyncio.run(run())))
"""


def test_waiting_publishes_go_in_order_in_batches_of_the_most(redis_server, tmp_path) -> None:
    """2,500 publishes waiting go as batches of at most 1,000, in order; those handed over
    while the first batch is on its way join the tail (the last batch)."""
    sent = django_script(redis_server.url, tmp_path, BATCHES)
    assert [len(batch) for batch in sent] == [1000, 1000, 503]
    assert [queue for batch in sent for queue in batch] == [
        *(f"q-{n}" for n in range(2500)),
        *(f"late-{n}" for n in range(3)),
    ]
