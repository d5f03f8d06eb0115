"""The README's console screenshots, made on a service of their own with realistic wiring
(an order flow with parrot subscribers, a wolfpack, a housecat, dead letters) and live
traffic. They go to tests/browser/screenshots/docs/; with XUMP_DOCS_SCREENSHOTS=1 to docs/
(docs/console-dashboard.png, docs/console-selector.png, docs/console-topology.png).
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from engine.message import Message
from engine.relay import RelayClient
from tests.browser.conftest import ROOT, SHOTS, log_in
from tests.web.conftest import start_service

REGIONS = ("eu", "us", "apac")


@pytest.fixture(scope="module")
def showroom(redis_server, tmp_path_factory):
    """A service with nothing but the wiring of the screenshots."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("showroom"), "inline")
    relay = RelayClient(redis_server.url, running.env["XUMP_STORE"])
    try:
        wire(running, relay)
        yield running, relay
    finally:
        relay.close()
        running.close()


def wire(service, relay: RelayClient) -> None:
    queue = lambda name, **s: relay.call("queue_create", name=name, **s)  # noqa: E731
    select = lambda q, **s: relay.call("selector_create", queue=q, enabled=True, **s)  # noqa: E731
    queue("orders.dead")
    queue("orders", history=5000, dead_letter="orders.dead")
    queue("fraud-check", history=1000)
    queue("events", history=2000)
    queue("payments.dead")
    queue("payments", history=1000, dead_letter="payments.dead")
    queue("ledger", history=1000)
    select("orders", when="filter", filter="amount > 900 and region = 'eu'", action="copy",
           target="fraud-check")  # fmt: skip
    select("orders", when="match", match={"operator": "topic", "pattern": "order.#",
           "field": "address"}, action="move", target="events")  # fmt: skip
    select("fraud-check", when="always", action="deliver", target="fraud-scorer")
    select("payments", when="match", match={"operator": "topic", "pattern": "payment.*",
           "field": "address"}, action="move", target="ledger")  # fmt: skip
    select("ledger", when="always", action="deliver", target="ledger-writer")
    with service.client() as api:
        for name, topic in (
            ("billing", "order.*.paid"),
            ("analytics", "order.#"),
            ("shipping", "order.*.paid"),
            ("notifier", "order.*.shipped"),
        ):
            made = api.post(
                "/api/patterns",
                json={"kind": "parrot", "name": name, "router": "events", "topic": topic},
            )
            assert made.status_code == 201, made.text
        for worker in ("resizer-1", "resizer-2", "resizer-3"):
            made = api.post(
                "/api/patterns",
                json={"kind": "wolfpack", "name": worker, "router": "jobs.resize", "credit": 5},
            )
            assert made.status_code == 201, made.text
        for person in ("alice", "bob"):
            made = api.post(
                "/api/patterns", json={"kind": "housecat", "name": person, "router": "mail"}
            )
            assert made.status_code == 201, made.text


def order(rng: random.Random, n: int) -> Message:
    state = rng.choice(("created", "created", "paid", "paid", "shipped"))
    region = rng.choice(REGIONS)
    amount = round(rng.lognormvariate(5.5, 0.9), 2)
    return Message(
        address=f"order.{region}.{state}",
        headers={"region": region, "amount": amount, "customer": f"c-{rng.randint(1, 400)}"},
        body=(f'{{"order": {n}, "amount": {amount}, "items": {rng.randint(1, 6)}}}').encode(),
    )


def traffic(relay: RelayClient, stop: threading.Event, rng: random.Random) -> None:
    """Bursts of orders, payments (a few of them unroutable) and resize jobs."""
    n = 0
    while not stop.is_set():
        size = rng.randint(20, 60)
        relay.publish_many("orders", [order(rng, n + i) for i in range(size)])
        n += size
        relay.publish_many("payments", [
            Message(address=rng.choice(("payment.card", "payment.card", "payment.sepa",
                                        "refund.card")),
                    headers={"amount": rng.randint(5, 900)}, body=b'{"ok": true}')
            for _ in range(rng.randint(5, 15))
        ])  # fmt: skip
        relay.publish_many("jobs.resize", [Message(address="resize", body=b"img")
                                           for _ in range(rng.randint(2, 8))])  # fmt: skip
        relay.publish_many("mail", [Message(address=rng.choice(("alice", "bob")), body=b"hi")])
        stop.wait(0.25)


def target(name: str) -> Path:
    if os.environ.get("XUMP_DOCS_SCREENSHOTS") == "1":
        return ROOT / "docs" / name
    (SHOTS / "docs").mkdir(parents=True, exist_ok=True)
    return SHOTS / "docs" / name


def test_console_screenshots_for_the_readme(browser, showroom):
    service, relay = showroom
    rng = random.Random(7)
    stop = threading.Event()
    feeder = threading.Thread(target=traffic, args=(relay, stop, rng), daemon=True)
    context = browser.new_context(base_url=service.url, viewport={"width": 1400, "height": 860},
                                  device_scale_factor=1)  # fmt: skip
    page = context.new_page()
    page.set_default_timeout(15_000)
    page_errors: list[str] = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    try:
        page.goto("/login/")
        log_in(page)
        page.wait_for_url(service.url + "/")
        feeder.start()
        # the dashboard, after some seconds of traffic: sparklines have a shape
        page.wait_for_function(
            "() => [...document.querySelectorAll('.spark')].filter(s => s._plot"
            " && s._plot.data[0].length >= 14).length >= 6",
            timeout=30_000,
        )
        page.screenshot(path=str(target("console-dashboard.png")), full_page=True)

        # the selector builder: a filter checked as typed and its preview
        page.goto("/queues/orders/selectors/new/")
        page.locator("input[name=when][value=filter]").check()
        page.get_by_role("textbox", name="filter expression").fill(
            "amount > 500 and region in ('eu', 'apac')"
        )
        page.locator("#filter-check").get_by_text("Valid.").wait_for()
        page.get_by_label("DO").select_option("copy")
        page.get_by_label("target").fill("fraud-check")
        page.get_by_role("button", name="Preview against recent messages").click()
        page.locator("#preview tbody tr").first.wait_for()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(target("console-selector.png")), full_page=False)

        # the topology with live rates on it
        page.goto("/topology/")
        page.wait_for_function("() => document.getElementById('cy').dataset.ready === 'yes'")
        page.wait_for_function("() => window.xumpTopology.edges('[w]').length >= 4", timeout=15_000)
        page.screenshot(path=str(target("console-topology.png")), full_page=False)
        assert not page_errors
    finally:
        stop.set()
        feeder.join(timeout=10)
        context.close()
