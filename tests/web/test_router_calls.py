"""Operations answered by the router (xumpweb/router/operations.py), called the way every
process calls them: through the store's relay, here against the running service."""

from __future__ import annotations

import pytest
import redis

from engine import Message
from engine.errors import InvalidSelector, NotFound
from tests.web.conftest import unique


def wiring_version(service) -> int:
    store = service.env["XUMP_STORE"]
    return int(
        redis.Redis.from_url(service.env["XUMP_REDIS_URL"]).get(f"xump:{{{store}}}:wiring") or 0
    )


def test_a_call_reads_the_writes_sent_before_it(relay) -> None:
    queue = unique()
    relay.call("queue_create", name=queue, history=10)
    relay.call("selector_create", queue=queue, when="always", action="delete", enabled=True)
    relay.publish_many(queue, [Message(body=b"%d" % n) for n in range(3)])
    page = relay.call("browse", queue=queue, start="oldest", count=10)
    assert [m["body"] for m in page] == ["0", "1", "2"]


def test_engine_errors_come_back_as_their_own_class_with_the_column(relay) -> None:
    queue = unique()
    relay.call("queue_create", name=queue)
    with pytest.raises(InvalidSelector, match="column 5"):
        relay.call("selector_create", queue=queue, when="filter", filter="a = = 1")
    assert relay.call("selectors", queue=queue) == []
    with pytest.raises(NotFound):
        relay.call("stats", queue=unique("missing"))


def test_a_wiring_change_moves_the_wiring_version(service, relay) -> None:
    """In the commit that answers the call: a caller that has the answer never reads the
    old version (a publish right after a queue_create was once refused as not found)."""
    for _ in range(20):
        before = wiring_version(service)
        relay.call("queue_create", name=unique())
        assert wiring_version(service) > before
    seen = wiring_version(service)
    relay.call("queues")
    assert wiring_version(service) == seen  # reads change nothing


def test_dead_letters_go_back_to_the_queue_they_came_from(relay) -> None:
    dead, queue = unique("dead"), unique()
    relay.call("queue_create", name=dead)
    relay.call("queue_create", name=queue, dead_letter=dead)
    relay.call("selector_create", queue=queue, when="match",
               match={"operator": "eq", "pattern": "known"}, action="deliver",
               target=unique("d"), enabled=True)  # fmt: skip
    [mid] = relay.publish_many(queue, [Message(address="stray", body=b"lost")])
    [letter] = relay.call("peek", queue=dead)
    assert letter["mid"] == mid and letter["headers"]["x-reason"] == "unroutable"
    # routed back with a catch-all in place, it is taken there; the dead letter is gone
    relay.call("selector_create", queue=queue, when="default", action="delete", enabled=True)
    sent = relay.call("dead_letter_send", queue=dead, seqs=[letter["seq"]])
    assert sent == {"sent": 1, "to": {queue: 1}}
    assert relay.call("peek", queue=dead) == []
    assert relay.call("stats", queue=queue)["published"] == 2


def test_dead_letter_send_with_an_unknown_target_changes_nothing(relay) -> None:
    dead = unique("dead")
    relay.call("queue_create", name=dead)
    relay.publish_many(dead, [Message(body=b"x")])
    [letter] = relay.call("peek", queue=dead)
    with pytest.raises(NotFound):
        relay.call("dead_letter_send", queue=dead, seqs=[letter["seq"]], target=unique("no"))
    assert len(relay.call("peek", queue=dead)) == 1


def test_purge_empties_a_queue(relay) -> None:
    queue = unique()
    relay.call("queue_create", name=queue)
    relay.publish_many(queue, [Message(body=b"x")] * 4)
    assert relay.call("purge", queue=queue) == {"purged": 4}
    assert relay.call("queue_get", name=queue)["depth"] == 0
