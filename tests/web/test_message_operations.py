"""Operations on a queue's waiting messages (engine/message_ops.py through the router call
`messages_operate`, and /api/queues/<q>/messages/operate, /purge, /dead-letters/send):
the filter chooses what a selector's filter would, dry runs change nothing, everything is
all or nothing, audited, and refused without the rights."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from engine import Message
from engine.errors import Changed, InvalidArgument, InvalidSelector, NotFound, QueueFull
from tests.web.conftest import unique
from tests.web.test_subscribe import issue_token, wait_for, xump

__all__ = ["xump"]  # the fixture


def held(xump, name: str, **settings) -> str:
    """A queue whose messages wait: its only selector is disabled."""
    xump.call("queue_create", name=name, **settings)
    xump.call("selector_create", queue=name, when="always", action="delete")
    return name


def fill(xump, queue: str, count: int = 10) -> list[str]:
    """`count` messages with headers n (0..count-1) and kind (odd/even); their mids."""
    mids = xump.relay.publish_many(queue, [
        Message(address=f"a.{n}", body=b"%d" % n, headers={"n": n, "kind": "odd" if n % 2
                                                           else "even"})
        for n in range(count)
    ])  # fmt: skip
    xump.kick()
    assert len(xump.call("peek", queue=queue, count=100)) == count
    return mids


def ns(xump, queue: str) -> list[int]:
    return [m["headers"]["n"] for m in xump.call("peek", queue=queue, count=1000)]


def test_a_filter_moves_exactly_the_matching_messages_in_order_with_their_mids(xump):
    source, target = held(xump, unique("src")), held(xump, unique("dst"))
    mids = fill(xump, source)
    dry = xump.call("messages_operate", queue=source, action="move", target=target,
                    filter="kind = 'odd' AND n > 2", dry_run=True)  # fmt: skip
    assert dry["matched"] == 4 and dry["done"] == 0
    assert [m["headers"]["n"] for m in dry["sample"]] == [3, 5, 7, 9] and ns(xump, target) == []
    done = xump.call("messages_operate", queue=source, action="move", target=target,
                     filter="kind = 'odd' AND n > 2", expect=4)  # fmt: skip
    assert done["done"] == 4
    assert ns(xump, source) == [0, 1, 2, 4, 6, 8]
    moved = xump.call("peek", queue=target, count=100)
    assert [m["headers"]["n"] for m in moved] == [3, 5, 7, 9]
    assert [m["mid"] for m in moved] == [mids[3], mids[5], mids[7], mids[9]]
    assert [m["seq"] for m in moved] == [1, 2, 3, 4]  # the target's own seqs


def test_the_filter_has_the_selectors_semantics_numbers_envelope_and_unknown(xump):
    queue = held(xump, unique())
    fill(xump, queue)
    count = lambda text: xump.call("messages_operate", queue=queue, action="delete",  # noqa: E731
                                   filter=text, dry_run=True)["matched"]  # fmt: skip
    assert count("n BETWEEN 2 AND 4") == 3
    assert count("n = '3'") == 0  # kinds never compare
    assert count("missing = 1 OR n = 1") == 1  # UNKNOWN OR TRUE
    assert count("NOT missing = 1") == 0  # NOT UNKNOWN does not select
    assert count("address LIKE 'a.1%'") == 1
    with pytest.raises(InvalidSelector, match="column"):
        count("n = = 1")


def test_copy_keeps_the_source_and_delete_and_seqs_and_mids_choose(xump):
    source, target = held(xump, unique("src")), held(xump, unique("dst"))
    mids = fill(xump, source, 5)
    xump.call("messages_operate", queue=source, action="copy", target=target, seqs=[2, 4])
    assert ns(xump, source) == [0, 1, 2, 3, 4] and ns(xump, target) == [1, 3]
    xump.call("messages_operate", queue=source, action="delete", mids=[mids[0], mids[4]])
    assert ns(xump, source) == [1, 2, 3]
    assert xump.call("stats", queue=source)["dropped"] == 2


def test_reroute_publishes_them_again_with_a_new_address_to_be_routed_afresh(xump):
    queue, router, done_queue = held(xump, unique()), unique("router"), held(xump, unique("d"))
    xump.call("queue_create", name=router)
    xump.call("selector_create", queue=router, when="match", action="move", target=done_queue,
              match={"operator": "eq", "pattern": "again"}, enabled=True)  # fmt: skip
    fill(xump, queue, 4)
    done = xump.call("messages_operate", queue=queue, action="reroute", seqs=[2, 4],
                     target=router, address="again")  # fmt: skip
    assert done["done"] == 2 and done["target"] == router
    moved = xump.call("peek", queue=done_queue, count=10)
    assert [(m["address"], m["headers"]["n"]) for m in moved] == [("again", 1), ("again", 3)]
    assert ns(xump, queue) == [0, 2]
    # without a target: back into the same queue, at its tail
    xump.call("messages_operate", queue=queue, action="reroute", seqs=[1])
    assert ns(xump, queue) == [2, 0]


def test_bad_requests_change_nothing(xump):
    source, full = held(xump, unique("src")), held(xump, unique("full"), limit=2)
    fill(xump, source, 5)
    before = ns(xump, source)
    for arguments, error in (
        ({"action": "move", "filter": "n > 1"}, InvalidArgument),  # no target
        ({"action": "move", "target": source, "filter": "n > 1"}, InvalidArgument),
        ({"action": "move", "target": unique("none"), "filter": "n > 1"}, NotFound),
        ({"action": "delete", "seqs": [1, 99]}, NotFound),  # all or nothing
        ({"action": "delete", "mids": ["nope"]}, NotFound),
        ({"action": "delete", "seqs": [1], "filter": "n > 1"}, InvalidArgument),
        ({"action": "delete"}, InvalidArgument),
        ({"action": "explode", "seqs": [1]}, InvalidArgument),
        ({"action": "delete", "filter": "n > 1", "expect": 2}, Changed),  # 3 match
        ({"action": "move", "target": full, "filter": "n > 1"}, QueueFull),  # room for 2
    ):
        with pytest.raises(error):
            xump.call("messages_operate", queue=source, **arguments)
        assert ns(xump, source) == before and ns(xump, full) == []


def test_the_api_operates_dry_runs_first_audits_and_checks_rights(service, xump):
    source, target = held(xump, unique("jobs-src")), held(xump, unique("jobs-dst"))
    fill(xump, source, 6)
    url = f"/api/queues/{quote(source, safe='')}/messages/operate"
    body = {"action": "move", "target": target, "filter": "n >= 4"}
    dry = xump.http.post(url, json={**body, "dry_run": True}).json()
    assert dry["matched"] == 2 and ns(xump, source) == list(range(6))
    changed = xump.http.post(url, json={**body, "expect": 3})
    assert changed.status_code == 409 and changed.json()["error"] == "changed"
    done = xump.http.post(url, json={**body, "expect": 2})
    assert done.status_code == 200 and done.json()["done"] == 2, done.text
    assert ns(xump, target) == [4, 5]
    bad = xump.http.post(url, json={**body, "filter": "n = = 4"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_selector"
    assert xump.http.post(url, json={**body, "unknown": 1}).status_code == 400
    # manage on the source but no publish on the target: refused, nothing moves
    manager = issue_token(service, {source: ["manage"], target: ["read"]})
    with service.client(manager) as http:
        refused = http.post(url, json={"action": "move", "target": target, "seqs": [1]})
        assert refused.status_code == 403, refused.text
        assert http.post(url, json={"action": "delete", "seqs": [1]}).status_code == 200
    audit = service.manage("shell", "-c", "from xumpweb.wiring.models import AuditEvent\n"
                           f"print(sorted(AuditEvent.objects.filter(subject={source!r})"
                           ".values_list('action', flat=True)))")  # fmt: skip
    assert audit.stdout.strip().splitlines()[-1] == "['messages.delete', 'messages.move']"


def test_the_api_purges_and_sends_dead_letters_on(service, xump):
    dead, queue = held(xump, unique("dead")), unique()
    xump.call("queue_create", name=queue, dead_letter=dead)
    xump.call("selector_create", queue=queue, when="match", action="delete", enabled=True,
              match={"operator": "eq", "pattern": "never"})  # fmt: skip
    xump.publish(queue, ["x", "y", "z"])  # unroutable: dead letters
    assert len(xump.call("peek", queue=dead, count=10)) == 3
    sent = xump.http.post(f"/api/queues/{dead}/dead-letters/send",
                          json={"seqs": [1], "target": queue})  # fmt: skip
    assert sent.status_code == 200 and sent.json()["sent"] == 1, sent.text
    missing = xump.http.post(f"/api/queues/{dead}/dead-letters/send", json={"seqs": [99]})
    assert missing.status_code == 404
    # routed in the call's step: unroutable again, it is a dead letter again already
    assert len(xump.call("peek", queue=dead, count=10)) == 3
    assert xump.call("stats", queue=queue)["published"] == 4
    purged = xump.http.post(f"/api/queues/{dead}/purge")
    assert purged.status_code == 200 and purged.json() == {"purged": 3}, purged.text
    assert xump.call("peek", queue=dead, count=10) == []
    reader = issue_token(service, {"*": ["read"]})
    with service.client(reader) as http:
        assert http.post(f"/api/queues/{dead}/purge").status_code == 403


def test_a_moved_message_keeps_its_time_to_live(xump):
    source, target = held(xump, unique("src")), held(xump, unique("dst"))
    xump.relay.publish_many(source, [Message(body=b"short-lived", ttl=2.0)])
    xump.kick()
    done = xump.call("messages_operate", queue=source, action="move", target=target,
                     filter="address = ''")  # fmt: skip
    assert done["done"] == 1

    def expired() -> bool:
        xump.call("tick")  # lifetime's transitions, at the wall clock's time
        return xump.call("stats", queue=target)["expired"] == 1

    assert wait_for(expired, within=30)
    assert xump.call("peek", queue=target, count=10) == []
