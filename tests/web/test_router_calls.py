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


# -- a selector update is one change: all of it, or nothing ---------------------------------
def test_a_refused_update_leaves_the_conditions_it_had(relay) -> None:
    """The change added a MATCH to a filter-only selector before its target was refused:
    the MATCH went again with the rest (it stayed, combined with the filter)."""
    queue, target = unique(), unique("t")
    relay.call("queue_create", name=queue)
    relay.call("queue_create", name=target)
    made = relay.call("selector_create", queue=queue, when="filter", filter="n > 1",
                      action="copy", target=target, enabled=True)  # fmt: skip
    with pytest.raises(NotFound):
        relay.call("selector_update", queue=queue, id=made["id"], when="match",
                   matches=[{"operator": "eq", "pattern": "zzz"}], filter="n > 1",
                   action="copy", target=unique("missing"))  # fmt: skip
    after = relay.call("selector_get", queue=queue, id=made["id"])
    assert after["describe"] == made["describe"]
    assert (after["match"], after["matches"], after["filter"]) == (None, [], "n > 1")
    assert after["enabled"] is True
    relay.publish_many(queue, [Message(address="other", headers={"n": 2})])
    assert relay.call("stats", queue=target)["published"] == 1  # it routes as before


def test_a_refused_update_keeps_the_credit_in_use(relay) -> None:
    """Credit 10 with 3 deliveries outstanding leaves 7; a refused change gave back 10."""
    queue = unique()
    relay.call("queue_create", name=queue)
    made = relay.call("selector_create", queue=queue, when="always", action="deliver",
                      target=unique("d"), credit=10, enabled=True)  # fmt: skip
    relay.publish_many(queue, [Message(body=b"%d" % n) for n in range(3)])
    assert relay.call("selector_get", queue=queue, id=made["id"])["available_credit"] == 7
    with pytest.raises(InvalidSelector):
        relay.call("selector_update", queue=queue, id=made["id"], when="filter",
                   filter="a = = 1")  # fmt: skip
    after = relay.call("selector_get", queue=queue, id=made["id"])
    assert (after["available_credit"], after["credit"], after["outstanding"]) == (7, 10, 3)


def test_an_update_replays_no_history_again(relay) -> None:
    """A selector that started at the head of the history replayed it when enabled; a
    change while it stays enabled (a refused one, or one of its credit) replayed it all
    again: every message of the history copied a second and a third time."""
    queue, target = unique(), unique("t")
    relay.call("queue_create", name=queue, history=10)
    relay.call("queue_create", name=target, history=100)
    relay.call("selector_create", queue=queue, when="always", action="delete", enabled=True)
    relay.publish_many(queue, [Message(address="m", body=b"%d" % n) for n in range(3)])
    made = relay.call("selector_create", queue=queue, when="always", action="copy",
                      target=target, start="head", enabled=True)  # fmt: skip
    assert relay.call("stats", queue=target)["published"] == 3
    with pytest.raises(NotFound):
        relay.call("selector_update", queue=queue, id=made["id"], action="copy",
                   target=unique("missing"))  # fmt: skip
    relay.call("selector_update", queue=queue, id=made["id"], credit=999)
    assert relay.call("stats", queue=target)["published"] == 3
    relay.publish_many(queue, [Message(address="m", body=b"new")])
    assert relay.call("stats", queue=target)["published"] == 4  # and it routes live traffic
    relay.call("selector_update", queue=queue, id=made["id"], start="head", credit=5)
    assert relay.call("stats", queue=target)["published"] == 4  # the same start: no replay
    relay.call("selector_update", queue=queue, id=made["id"], enabled=False)
    relay.call("selector_update", queue=queue, id=made["id"], enabled=True)
    # enabled anew: it starts at the head again, as a newly enabled selector does
    assert relay.call("stats", queue=target)["published"] == 8
    relay.call("selector_update", queue=queue, id=made["id"], start=3)
    # another start, given while it routes: it starts there (seqs 3 and 4 of the history)
    assert relay.call("stats", queue=target)["published"] == 10
