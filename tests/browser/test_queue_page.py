"""The queue page: history browser, message detail, publishing, settings, purge."""

from __future__ import annotations

import json

from engine.message import Message
from tests.browser.conftest import axe_scan, make_queue, publish


def seqs_shown(page) -> list[int]:
    return [int(t) for t in page.locator("#history tbody td.num a").all_inner_texts()]


def history_queue(relay, count: int) -> str:
    """A queue whose `count` messages all went to history (an enabled COPY takes each)."""
    queue = make_queue(relay, history=1000)
    sink = make_queue(relay)
    relay.call("selector_create", queue=queue, when="always", action="copy", target=sink,
               enabled=True)  # fmt: skip
    publish(relay, queue, *[
        Message(address=f"order.{n}", headers={"n": n, "priority": n % 10}, body=b"body %d" % n)
        for n in range(1, count + 1)
    ])  # fmt: skip
    return queue


def test_history_pages_forward_and_back(page, relay):
    queue = history_queue(relay, 45)  # pages of 20: 45..26, 25..6, 5..1
    page.goto(f"/queues/{queue}/")
    assert seqs_shown(page) == list(range(45, 25, -1))  # latest first
    for link, shown in [
        ("← Older", list(range(25, 5, -1))),
        ("← Older", [5, 4, 3, 2, 1]),
        ("Newer →", list(range(25, 5, -1))),
        ("Oldest", list(range(20, 0, -1))),
        ("Latest", list(range(45, 25, -1))),
    ]:
        page.get_by_role("link", name=link).click()
        page.wait_for_function(
            "first => document.querySelector('#history tbody td.num a').textContent === first",
            arg=str(shown[0]),
        )
        assert seqs_shown(page) == shown, link
    assert not page.errors


def test_history_since_a_time_and_filtered_by_an_expression(page, relay):
    queue = history_queue(relay, 12)
    page.goto(f"/queues/{queue}/")
    page.get_by_label("Since (UTC)").fill("2000-01-01 00:00")
    page.get_by_label("Filter", exact=True).fill("priority >= 8")
    page.get_by_role("button", name="Show").click()
    page.wait_for_function(
        "() => document.querySelector('#history-summary').textContent.includes('match')"
    )
    # since 2000: the oldest 12, of which n=8, 9 have priority >= 8
    assert seqs_shown(page) == [9, 8]
    assert "2 matching the filter" in page.locator("#history-summary").inner_text()


def test_filter_error_names_its_column(page, relay):
    queue = history_queue(relay, 3)
    page.goto(f"/queues/{queue}/")
    page.get_by_label("Filter", exact=True).fill("priority >> 5")
    page.get_by_role("button", name="Show").click()
    error = page.locator("#history .expr-error")
    error.wait_for()
    assert "column 11" in error.inner_text()


def test_message_detail_shows_text_json_and_hex(page, relay):
    queue = make_queue(relay)
    body = json.dumps({"order": 7, "items": ["a", "b"]}).encode()
    publish(relay, queue, Message(address="orders.eu", headers={"region": "eu"}, body=body))
    page.goto(f"/queues/{queue}/messages/1/")
    assert page.locator("#message-address").inner_text() == "orders.eu"
    assert page.locator("#message-body").inner_text() == body.decode()
    page.get_by_role("link", name="JSON").click()
    assert '"items": [' in page.locator("#message-body").inner_text()
    page.get_by_role("link", name="Hex").click()
    assert page.locator("#message-body").inner_text().startswith("00000000  7b 22 6f 72")
    assert axe_scan(page) == []


def test_publish_a_test_message(page, relay):
    queue = make_queue(relay)
    page.goto(f"/queues/{queue}/")
    page.get_by_label("Address", exact=True).fill("test.one")
    page.get_by_label("Headers").fill("priority: 7\nregion: eu")
    page.get_by_label("Body").fill("hello")
    page.get_by_role("button", name="Publish").click()
    page.get_by_text("Published message").wait_for()
    [waiting] = relay.call("peek", queue=queue)
    assert (waiting["address"], waiting["headers"], waiting["body"]) == (
        "test.one",
        {"priority": 7, "region": "eu"},
        "hello",
    )


def test_settings_are_saved_and_audited(page, relay):
    queue = make_queue(relay)
    page.goto(f"/queues/{queue}/")
    page.get_by_label("Limit").fill("50")
    page.get_by_role("spinbutton", name="History").fill("25")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Settings saved.").wait_for()
    answer = relay.call("queue_get", name=queue)
    assert (answer["limit"], answer["history"]) == (50, 25)
    page.goto(f"/audit/?q={queue}")
    assert "queue.update" in page.locator("table.audit").inner_text()


def test_purge_asks_for_the_name_then_drops_waiting_messages(page, relay):
    queue = make_queue(relay)
    publish(relay, queue, *[Message(body=b"x") for _ in range(4)])
    page.goto(f"/queues/{queue}/")
    page.get_by_role("link", name="Purge waiting messages…").click()
    page.get_by_role("button", name="Purge").click()  # the browser refuses: name required
    assert relay.call("queue_get", name=queue)["depth"] == 4
    page.get_by_label("Type the queue's name to confirm").fill(queue)
    page.get_by_role("button", name="Purge").click()
    page.get_by_text("Purged 4 waiting messages.").wait_for()
    assert relay.call("queue_get", name=queue)["depth"] == 0


def test_it_passes_axe(page, relay):
    queue = history_queue(relay, 3)
    page.goto(f"/queues/{queue}/")
    assert axe_scan(page) == []


def test_an_unknown_queue_gets_the_consoles_not_found_page(page):
    answer = page.goto("/queues/no-such-queue-here/")
    assert answer.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()
    assert "/queues/no-such-queue-here/" in page.locator("main").inner_text()
    page.get_by_role("link", name="Back to the dashboard").click()
    page.get_by_role("heading", name="Dashboard").wait_for()
