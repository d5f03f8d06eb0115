"""Message lifetime in the console (SPEC §8, issue 16): an operator sets a delivery limit
and a redelivery delay in the queue's settings, a subscriber rejects a poison message until
it lands in the dead-letter inspector under "delivery-limit"; a delayed message shows in
the queue's Scheduled tab and is cancelled there."""

from __future__ import annotations

import time

import pytest

from engine.message import Message
from tests.browser.conftest import WIDE, axe_scan, log_in, make_queue, open_page, publish, unique
from tests.web.test_subscribe import send, subscribe, take

PASSWORD = "lifetime-password-1"


@pytest.fixture(scope="module")
def operator(console) -> str:
    """An operator granted `life-*`."""
    name = unique("operator")
    made = console.manage("shell", "-c", (
        "from django.contrib.auth.models import Group, User\n"
        "from xumpweb.wiring.models import QueueGrant\n"
        f"user = User.objects.create_user({name!r}, password={PASSWORD!r})\n"
        "user.groups.add(Group.objects.get(name='operator'))\n"
        "QueueGrant.objects.create(user=user, queues='life-*',\n"
        "    rights=['publish', 'consume', 'manage'])"))  # fmt: skip
    assert made.returncode == 0, made.stderr
    return name


@pytest.fixture
def operator_page(browser, console, operator, request):
    with open_page(browser, console.url, request, viewport=WIDE) as page:
        page.goto("/login/")
        log_in(page, operator, PASSWORD)
        page.wait_for_url(console.url + "/")
        yield page


def test_a_poison_message_reaches_the_inspector_under_delivery_limit(operator_page, console, relay):
    page = operator_page
    queue, dead, destination = unique("life-q"), unique("life-dead"), unique("life-d")
    make_queue(relay, dead)
    make_queue(relay, queue, history=5)
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip

    page.goto(f"/queues/{queue}/")
    page.get_by_label("Dead letter", exact=True).fill(dead)
    page.get_by_label("Max deliveries", exact=True).fill("3")
    page.get_by_label("Redelivery delay", exact=True).fill("0.2")
    page.get_by_label("Redelivery backoff", exact=True).fill("2")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Settings saved.").wait_for()
    shown = relay.call("queue_get", name=queue)
    assert (shown["max_deliveries"], shown["redelivery_delay"], shown["redelivery_backoff"],
            shown["dead_letter"]) == (3, 0.2, 2.0, dead)  # fmt: skip

    with subscribe(console, destination) as socket:
        send(socket, {"type": "credit", "n": 10})  # a new connection has none
        [mid] = publish(relay, queue, Message(address="poison", body=b"cannot process"))
        counts = []
        for _ in range(3):
            [delivery] = take(socket, 1)
            assert delivery["message"]["mid"] == mid
            counts.append(delivery["delivery_count"])
            send(socket, {"type": "reject", "tag": delivery["tag"]})  # requeue: the default
    assert counts == [1, 2, 3]

    deadline = time.monotonic() + 30
    while not relay.call("peek", queue=dead, count=1):
        assert time.monotonic() < deadline, "the poison message never reached the DLQ"
        time.sleep(0.1)
    page.goto("/dead-letters/")
    group = page.locator("section.card", has=page.locator("h2", has_text=queue))
    group.get_by_text("delivery-limit", exact=True).wait_for()
    assert group.locator("tbody tr").count() == 1
    assert "x-delivery-count=3" in group.locator("tbody tr").inner_text()
    assert relay.call("stats", queue=queue)["delivery_limited"] == 1
    page.goto(f"/queues/{queue}/")
    assert page.locator("dt", has_text="Delivery-limited").count() == 1
    assert not page.errors


def test_a_delayed_message_shows_in_the_scheduled_tab_and_is_cancelled_there(operator_page, relay):
    page = operator_page
    queue = make_queue(relay, unique("life-s"))
    [later, keep, *more] = publish(relay, queue,
                                   Message(address="reminder", headers={"customer": 7},
                                           body=b"call back", delay=3600),
                                   Message(address="other", body=b"stays", delay=7200),
                                   Message(body=b"x", delay=8000),
                                   Message(body=b"y", delay=9000))  # fmt: skip
    page.goto(f"/queues/{queue}/")
    page.get_by_role("link", name="Scheduled (4)").click()
    page.get_by_role("heading", name=f"Scheduled in {queue}").wait_for()
    rows = page.locator("#scheduled-table tbody tr")
    assert rows.count() == 4
    assert axe_scan(page) == []
    first = rows.first.inner_text()
    assert later in first and "customer=7" in first and "delayed" in first
    due = relay.call("scheduled", queue=queue)["messages"][0]["due"]
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(due)) in first  # 24-hour UTC

    rows.first.get_by_role("button", name=f"Cancel message {later}").click()
    page.get_by_text("Cancelled 1 scheduled message.").wait_for()
    assert [m["mid"] for m in relay.call("scheduled", queue=queue)["messages"]] == [keep, *more]
    assert page.locator("#scheduled-table tbody tr").count() == 3
    for mid in more:  # many at once
        page.get_by_label(f"choose message {mid}").check()
    page.get_by_role("button", name="Cancel the chosen messages").click()
    page.get_by_text("Cancelled 2 scheduled messages.").wait_for()
    assert [m["mid"] for m in relay.call("scheduled", queue=queue)["messages"]] == [keep]
    assert page.locator("#scheduled-table tbody tr").count() == 1
    assert relay.call("stats", queue=queue)["dropped"] == 3
    page.goto("/audit/")
    assert page.get_by_text("message.cancel").count() >= 1
    assert not page.errors


def test_a_message_detail_shows_its_priority_and_ttl(page, relay):
    queue = make_queue(relay, unique("life-m"), priorities=10)
    publish(relay, queue, Message(body=b"urgent", headers={"priority": 9}, ttl=600))
    page.goto(f"/queues/{queue}/messages/1/")
    assert page.locator("#message-priority").inner_text() == "9"
    assert page.locator("#message-ttl").inner_text().startswith("600.0 s (expires ")
    assert not page.errors


def test_a_queue_created_in_the_console_gets_its_priority_levels(page, relay):
    queue = unique("life-p")
    page.goto("/")
    page.locator("#create-queue summary").click()
    form = page.locator("#create-queue")
    form.get_by_label("Name", exact=True).fill(queue)
    form.get_by_label("Priorities", exact=True).fill("10")
    form.get_by_label("Ttl", exact=True).fill("30")
    form.get_by_role("button").last.click()
    page.get_by_role("heading", name=f"Queue {queue}").wait_for()
    shown = relay.call("queue_get", name=queue)
    assert (shown["priorities"], shown["ttl"], shown["max_deliveries"]) == (10, 30.0, None)
    page.goto("/")
    page.locator("#create-queue summary").click()
    levels = form.get_by_label("Priorities", exact=True)
    levels.fill("11")  # the browser holds the form back: out of the engine's 1-10
    assert levels.evaluate("field => field.validity.rangeOverflow")
    assert not page.errors
