"""STOMP from a browser: the example page static/examples/stomp.html (docs/stomp.md) runs
@stomp/stompjs in Chromium over /ws/stomp/, and a person uses it through its forms.

The page appends every event (connected, subscribed, receipt, message, acked, nacked,
error, closed, disconnected) to `window.results`; the tests wait on it with generous
deadlines. Wiring and statistics go through the store's relay, as programs would.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.browser.conftest import axe_scan, log_in, make_queue, shot_path, unique

EXAMPLE = "/static/examples/stomp.html"
WAIT = 30_000  # ms


@pytest.fixture
def example(browser, console, request):
    """The example page in a context that has not logged in to the console; its CSP
    violations and script errors are kept in `problems`."""
    context = browser.new_context(base_url=console.url, viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))

    def console_error(message) -> None:
        url = message.location["url"]
        if message.type == "error" and not url.endswith("/favicon.ico"):  # the console's
            problems.append(f"{message.text} ({url})")

    opened.on("console", console_error)
    opened.problems = problems
    opened.goto(EXAMPLE)
    yield opened
    try:
        opened.screenshot(path=str(shot_path(request.node.name)), full_page=True)
    finally:
        context.close()


def wiring(relay) -> tuple[str, str]:
    """A queue delivering everything to a destination of its own: (queue, destination)."""
    queue, destination = make_queue(relay), unique("d")
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    return queue, destination


def events(page, kind: str, count: int = 1, **fields: Any) -> list[dict[str, Any]]:
    """The page's events of `kind` whose `fields` are as given, once there are `count`."""
    page.wait_for_function(
        "([kind, count, fields]) => window.results.filter(e => e.event === kind"
        " && Object.entries(fields).every(([k, v]) => e[k] === v)).length >= count",
        arg=[kind, count, fields],
        timeout=WAIT,
    )
    found = page.evaluate("window.results")
    return [
        e for e in found if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())
    ]


def connect(page, passcode: str) -> None:
    before = len(events_now(page, "connected"))
    page.get_by_label("Passcode").fill(passcode)
    page.get_by_role("button", name="Connect", exact=True).click()
    events(page, "connected", before + 1)


def events_now(page, kind: str) -> list[dict[str, Any]]:
    return [e for e in page.evaluate("window.results") if e["event"] == kind]


def subscribe(page, destination: str, selector: str = "", ack: str = "client-individual",
              prefetch: int = 10) -> None:  # fmt: skip
    page.locator("#subscribe-form").get_by_label("Destination").fill(destination)
    page.get_by_label("Selector").fill(selector)
    page.get_by_label("Acknowledgement").select_option(ack)
    page.get_by_label("Prefetch").fill(str(prefetch))
    page.get_by_role("button", name="Subscribe").click()
    events(page, "subscribed", destination=destination)


def send(page, destination: str, body: str, headers: str = "") -> None:
    form = page.locator("#send-form")
    form.get_by_label("Destination").fill(destination)
    form.get_by_label("Headers").fill(headers)
    form.get_by_label("Body").fill(body)
    form.get_by_role("button", name="Send").click()


def settle(page, n: int, button: str) -> None:
    page.locator(f"#message-{n}").get_by_role("button", name=button, exact=True).click()


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["body"] for m in messages]


def wait_for(condition, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_it_publishes_with_receipts_and_receives_what_the_selector_picks(example, console,
                                                                         relay):  # fmt: skip
    queue, destination = wiring(relay)
    connect(example, console.admin_token)
    subscribe(example, f"/queue/{destination}", selector="region = 'eu'")
    for body, region in [("one", "eu"), ("two", "us"), ("three", "eu")]:
        send(example, f"/queue/{queue}", body, f"region: {region}\npriority: 3")
    receipts = events(example, "receipt", 3)
    assert [r["receipt"] for r in receipts] == ["send-1", "send-2", "send-3"]
    messages = events(example, "message", 2)
    assert bodies(messages) == ["one", "three"]
    headers = messages[0]["headers"]
    assert headers["destination"] == f"/queue/{destination}"
    assert headers["region"] == "eu" and headers["priority"] == "3"
    assert headers["redelivered"] == "false" and headers["x-delivery-count"] == "1"
    assert headers["mid"] and headers["ack"] and headers["subscription"]
    assert "receipt" not in headers  # STOMP's own headers are not message headers
    settle(example, 1, "ACK")
    settle(example, 2, "ACK")
    events(example, "acked", 2)
    assert wait_for(lambda: relay.call("stats", queue=queue)["confirmed"] == 2)
    time.sleep(1)  # "two" is not for this subscription: it never comes
    assert bodies(events_now(example, "message")) == ["one", "three"]
    assert axe_scan(example) == []
    assert not example.problems


def test_a_nacked_message_comes_back_redelivered(example, console, relay):
    queue, destination = wiring(relay)
    connect(example, console.admin_token)
    subscribe(example, f"/queue/{destination}")
    send(example, f"/queue/{queue}", "try again")
    (first,) = events(example, "message")
    assert first["redelivered"] is False
    settle(example, 1, "NACK")
    events(example, "nacked")
    (again,) = events(example, "message", redelivered=True)
    assert again["body"] == "try again" and again["headers"]["mid"] == first["headers"]["mid"]
    assert again["headers"]["x-delivery-count"] == "2"
    settle(example, again["n"], "ACK")
    events(example, "acked")
    assert wait_for(lambda: relay.call("stats", queue=queue)["confirmed"] == 1)
    assert not example.problems


@pytest.mark.parametrize("how", ["disconnect", "drop"])
def test_unacknowledged_messages_come_back_after_a_reconnect(example, console, relay, how):
    """Disconnect then Connect (deactivate, activate), or the socket dropped (stompjs opens
    it again by itself): onConnect subscribes again and what was not acked comes back."""
    queue, destination = wiring(relay)
    connect(example, console.admin_token)
    subscribe(example, f"/queue/{destination}")
    for body in ("kept", "dropped"):
        send(example, f"/queue/{queue}", body)
    first = events(example, "message", 2)
    assert bodies(first) == ["kept", "dropped"]
    settle(example, 1, "ACK")
    events(example, "acked")
    if how == "disconnect":
        example.get_by_role("button", name="Disconnect").click()
        events(example, "disconnected")
        connect(example, console.admin_token)
    else:
        example.evaluate("window.stompExample.client.forceDisconnect()")
        events(example, "closed")
        events(example, "connected", 2)
    events(example, "subscribed", 2)
    (again,) = events(example, "message", redelivered=True)
    assert again["body"] == "dropped" and again["headers"]["mid"] == first[1]["headers"]["mid"]
    settle(example, again["n"], "ACK")
    events(example, "acked", 2)
    assert wait_for(lambda: relay.call("stats", queue=queue)["confirmed"] == 2)
    assert bodies(events_now(example, "message")) == ["kept", "dropped", "dropped"]
    assert not example.problems


def test_prefetch_count_is_the_window_of_unacknowledged_messages(example, console, relay):
    queue, destination = wiring(relay)
    connect(example, console.admin_token)
    subscribe(example, f"/queue/{destination}", prefetch=1)
    for body in ("first", "second"):
        send(example, f"/queue/{queue}", body)
    events(example, "receipt", 2)
    events(example, "message")
    time.sleep(1.5)  # the window is full: "second" waits
    assert bodies(events_now(example, "message")) == ["first"]
    settle(example, 1, "ACK")
    assert bodies(events(example, "message", 2)) == ["first", "second"]
    assert not example.problems


def test_client_mode_acknowledges_every_message_up_to_the_one_acked(example, console, relay):
    queue, destination = wiring(relay)
    connect(example, console.admin_token)
    subscribe(example, f"/queue/{destination}", ack="client")
    for body in ("a", "b", "c"):
        send(example, f"/queue/{queue}", body)
    assert bodies(events(example, "message", 3)) == ["a", "b", "c"]
    settle(example, 2, "ACK")
    events(example, "acked")
    assert wait_for(lambda: relay.call("stats", queue=queue)["confirmed"] == 2)
    example.get_by_role("button", name="Disconnect").click()
    events(example, "disconnected")
    connect(example, console.admin_token)
    (again,) = events(example, "message", redelivered=True)
    assert again["body"] == "c"
    assert not example.problems


def test_a_bad_selector_gets_an_error_pointing_at_it(example, console, relay):
    connect(example, console.admin_token)
    example.locator("#subscribe-form").get_by_label("Destination").fill(f"/queue/{unique('d')}")
    example.get_by_label("Selector").fill("region = = 'eu'")
    example.get_by_role("button", name="Subscribe").click()
    (error,) = events(example, "error")
    assert error["message"].startswith("bad selector")
    assert "region = = 'eu'" in error["body"] and "^" in error["body"]


def test_the_page_is_served_under_the_console_s_content_security_policy(console):
    answer = httpx.get(console.url + EXAMPLE)
    assert answer.status_code == 200
    assert "script-src 'self'" in answer.headers["Content-Security-Policy"]


def test_topic_subscriptions_receive_what_matches_their_pattern(example, console):
    word = unique("stock").replace("-", "")
    connect(example, console.admin_token)
    subscribe(example, f"/topic/{word}.*.price", ack="auto")
    send(example, f"/topic/{word}.acme.volume", "not this")
    send(example, f"/topic/{word}.acme.price", "42")
    events(example, "receipt", 2)
    (message,) = events(example, "message")
    assert message["body"] == "42" and message["destination"] == f"/topic/{word}.acme.price"
    assert not example.locator("#message-1").get_by_role("button").count()  # ack: auto
    assert not example.problems


def test_a_wrong_passcode_gets_an_error_and_no_connection(example):
    example.get_by_label("Passcode").fill("xump_not-a-token")
    example.get_by_role("button", name="Connect", exact=True).click()
    (error,) = events(example, "error")
    assert error["message"] == "access refused"
    assert "unknown or revoked token" in error["body"]
    example.get_by_text("disconnected", exact=True).wait_for()
    assert not events_now(example, "connected")


def test_an_empty_passcode_without_a_console_login_is_refused(example):
    example.get_by_role("button", name="Connect", exact=True).click()
    (error,) = events(example, "error")
    assert error["message"] == "access refused" and "API token" in error["body"]
    assert not events_now(example, "connected")


def test_the_console_login_stands_in_for_an_empty_passcode(example, console, relay):
    queue, destination = wiring(relay)
    example.goto("/login/")
    log_in(example)
    example.wait_for_url(console.url + "/")
    example.goto(EXAMPLE)
    connect(example, "")
    subscribe(example, f"/queue/{destination}")
    send(example, f"/queue/{queue}", "from the console's user")
    events(example, "receipt")
    (message,) = events(example, "message")
    assert message["body"] == "from the console's user"
    settle(example, 1, "ACK")
    events(example, "acked")
    assert wait_for(lambda: relay.call("stats", queue=queue)["confirmed"] == 1)
    assert not example.problems
