"""Message operations on an ordinary queue (not a dead-letter queue) from its page: a
filter chooses; the dry run counts and shows a sample; confirming moves exactly the
matching messages, audited."""

from __future__ import annotations

from engine.message import Message
from tests.browser.conftest import axe_scan, make_queue, publish, unique


def held(relay, name: str | None = None) -> str:
    """A queue whose messages wait (its only selector is disabled)."""
    queue = make_queue(relay, name)
    relay.call("selector_create", queue=queue, when="always", action="delete")
    return queue


def test_a_filter_selected_move_moves_exactly_the_matching_messages(page, relay):
    source, target = held(relay, unique("orders")), held(relay, unique("parking"))
    mids = publish(relay, source, *[
        Message(address=f"order.{n}", body=b"order %d" % n,
                headers={"n": n, "region": "eu" if n % 3 == 0 else "us"})
        for n in range(12)
    ])  # fmt: skip
    page.goto(f"/queues/{source}/")
    page.get_by_role("link", name="Move, copy, delete or re-route messages…").click()
    page.get_by_label("What to do").select_option("move")
    page.get_by_label("Choose the messages by").select_option("filter")
    page.get_by_label("Filter, seqs or mids").fill("region = 'eu' AND n > 0")
    page.get_by_label("Target queue (move, copy; re-route: default this queue)").select_option(
        target)  # fmt: skip
    page.get_by_role("button", name="Count the matching messages…").click()
    assert page.locator("#matched").inner_text() == "3"  # n = 3, 6, 9
    assert relay.call("queue_get", name=source)["depth"] == 12  # a dry run changes nothing
    assert axe_scan(page) == []
    page.get_by_role("button", name="Move 3 messages").click()
    page.get_by_text(f"Moved 3 messages to {target}.").wait_for()
    moved = relay.call("peek", queue=target, count=100)
    assert [m["headers"]["n"] for m in moved] == [3, 6, 9]
    assert [m["mid"] for m in moved] == [mids[3], mids[6], mids[9]]
    left = relay.call("peek", queue=source, count=100)
    assert [m["headers"]["n"] for m in left] == [0, 1, 2, 4, 5, 7, 8, 10, 11]
    page.goto(f"/audit/?q={source}")
    assert "messages.move" in page.locator("table.audit").inner_text()
    assert not page.errors


def test_a_bad_filter_is_shown_and_changes_nothing(page, relay):
    source = held(relay)
    publish(relay, source, Message(body=b"x", headers={"n": 1}))
    page.goto(f"/queues/{source}/operate/")
    page.get_by_label("What to do").select_option("delete")
    page.get_by_label("Filter, seqs or mids").fill("n = = 1")
    page.get_by_role("button", name="Count the matching messages…").click()
    page.get_by_text("Nothing done:").wait_for()
    assert "column" in page.locator(".flash").inner_text()
    assert page.get_by_label("Filter, seqs or mids").input_value() == "n = = 1"
    assert relay.call("queue_get", name=source)["depth"] == 1
