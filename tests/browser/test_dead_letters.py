"""The dead-letter inspector: dead letters grouped by reason and source, re-routed to
their original queue, moved or deleted, each action audited."""

from __future__ import annotations

from engine.message import Message
from tests.browser.conftest import make_queue, publish, unique


def dead_lettered(relay, count: int = 1) -> tuple[str, str]:
    """(source, dead-letter queue) with `count` messages dead-lettered: no selector of the
    source takes them."""
    dlq = make_queue(relay, unique("dlq"))
    source = make_queue(relay, dead_letter=dlq)
    relay.call(
        "selector_create", queue=source, when="match",
        match={"operator": "eq", "pattern": "never", "field": "address"},
        action="delete", enabled=True,
    )  # fmt: skip
    publish(relay, source, *[Message(address=f"lost.{n}", body=b"lost %d" % n)
                             for n in range(count)])  # fmt: skip
    return source, dlq


def group_of(page, dlq):
    return page.locator("section.card", has=page.locator(f'a:text-is("{dlq}")'))


def test_re_route_a_dead_letter_to_its_original_queue(page, relay):
    source, dlq = dead_lettered(relay)
    sink = make_queue(relay)
    page.goto("/dead-letters/")
    group = group_of(page, dlq)
    assert source in group.locator("h2").inner_text()
    assert group.locator("tbody tr").count() == 1
    # the fix: the source learns to take such messages; then the dead letter is sent back
    relay.call("selector_create", queue=source, when="always", action="copy", target=sink,
               enabled=True)  # fmt: skip
    group.get_by_label("choose message 1").check()
    page.get_by_label("re-route to their original queue").check()
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Re-routed 1 dead letter.").wait_for()
    assert relay.call("queue_get", name=dlq)["depth"] == 0
    [arrived] = relay.call("peek", queue=sink)
    assert (arrived["address"], arrived["body"]) == ("lost.0", "lost 0")
    assert group_of(page, dlq).count() == 0
    page.goto(f"/audit/?q={dlq}")
    assert "deadletter.reroute" in page.locator("table.audit").inner_text()
    assert not page.errors


def test_move_several_then_delete_the_rest(page, relay):
    _, dlq = dead_lettered(relay, count=3)
    parking = make_queue(relay, unique("parking"))
    page.goto("/dead-letters/")
    group = group_of(page, dlq)
    group.get_by_label("choose message 1").check()
    group.get_by_label("choose message 2").check()
    page.get_by_label("move to").check()
    page.get_by_label("Target queue (for move)").select_option(parking)
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Moved 2 dead letters.").wait_for()
    assert [m["address"] for m in relay.call("peek", queue=parking)] == ["lost.0", "lost.1"]
    group = group_of(page, dlq)
    group.get_by_label("choose all of this group").check()
    page.get_by_label("delete", exact=True).check()
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Deleted 1 dead letter.").wait_for()
    assert relay.call("queue_get", name=dlq)["depth"] == 0
    page.goto(f"/audit/?q={dlq}")
    log = page.locator("table.audit").inner_text()
    assert "deadletter.move" in log and "deadletter.delete" in log


def test_nothing_chosen_changes_nothing(page, relay):
    _, dlq = dead_lettered(relay)
    page.goto("/dead-letters/")
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Choose at least one dead letter.").wait_for()
    assert relay.call("queue_get", name=dlq)["depth"] == 1


def test_bounce_sends_a_dead_letter_to_its_return_address_and_refuses_one_without(page, relay):
    dlq = make_queue(relay, unique("dlq"))
    source = make_queue(relay, dead_letter=dlq)
    replies = make_queue(relay, unique("replies"))
    relay.call(
        "selector_create", queue=source, when="match",
        match={"operator": "eq", "pattern": "never", "field": "address"},
        action="delete", enabled=True,
    )  # fmt: skip
    publish(relay, source, Message(address="order.7", body=b"order 7",
                                   return_address="reply.alice"))  # fmt: skip
    publish(relay, source, Message(address="order.8", body=b"order 8"))  # no return address
    # the fix: the source sends replies on; the bounce addresses the dead letter to one
    relay.call("selector_create", queue=source, when="match",
               match={"operator": "prefix", "pattern": "reply.", "field": "address"},
               action="move", target=replies, enabled=True)  # fmt: skip
    page.goto("/dead-letters/")
    group = group_of(page, dlq)
    group.get_by_label("choose message 1").check()
    page.get_by_label("bounce to their return address").check()
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Bounced 1 dead letter.").wait_for()
    [arrived] = relay.call("peek", queue=replies)
    assert (arrived["address"], arrived["body"]) == ("reply.alice", "order 7")
    assert arrived["headers"]["x-original-address"] == "order.7"
    group = group_of(page, dlq)
    group.get_by_label("choose message 2").check()  # order 8 (labels carry the seq)
    page.get_by_label("bounce to their return address").check()
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("has no return address to bounce to").wait_for()
    assert relay.call("queue_get", name=dlq)["depth"] == 1
    page.goto(f"/audit/?q={dlq}")
    assert "deadletter.bounce" in page.locator("table.audit").inner_text()
    assert not page.errors


def test_refused_commands_are_shown_then_cleared(page, relay):
    """A publish the router refuses (its queue was deleted after the publish was accepted)
    is set aside, not lost from sight."""
    gone = make_queue(relay, unique("gone"))
    relay.call("queue_delete", name=gone)
    [mid] = relay.publish_many(gone, [Message(address="a.b", body=b"x")])
    relay.call("queues")  # answered after the router applied (here: refused) the publish
    page.goto("/dead-letters/")
    refused = page.locator("#refused")
    row = refused.locator("tbody tr", has_text=gone)
    row.wait_for()
    assert mid in row.inner_text() and "does not exist" in row.inner_text()
    refused.get_by_role("link", name="Clear the refused commands…").click()
    page.get_by_role("button", name="Clear").click()
    page.get_by_text("Cleared").wait_for()
    assert page.locator("#refused tbody tr", has_text=gone).count() == 0
    page.goto("/audit/?q=refused")
    assert "refused.clear" in page.locator("table.audit").inner_text()
    assert not page.errors
