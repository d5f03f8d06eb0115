"""The dashboard: queues with live numbers, totals, health, filter and sort."""

from __future__ import annotations

from engine.message import Message
from tests.browser.conftest import axe_scan, make_queue, publish, unique


def row(page, queue):
    return page.locator(f'#queue-table tr[data-queue="{queue}"]')


def test_depth_changes_without_reload(page, relay):
    queue = make_queue(relay)  # no selectors: what is published waits, unprocessed
    page.goto("/")
    depth = row(page, queue).locator('[data-field="depth"]')
    assert depth.inner_text() == "0"
    page.evaluate("window.__sameDocument = true")
    publish(relay, queue, *[Message(address="a", body=b"x") for _ in range(7)])
    page.wait_for_function(
        "q => { const r = [...document.querySelectorAll('#queue-table tr[data-queue]')]"
        ".find(r => r.dataset.queue === q);"
        " return r && r.querySelector('[data-field=\"depth\"]').textContent.trim() === '7'; }",
        arg=queue,
        timeout=15_000,
    )
    assert page.evaluate("window.__sameDocument") is True  # no navigation happened
    # the sparkline is drawn once two points are known
    row(page, queue).locator(".spark canvas").wait_for(timeout=15_000)
    assert int(page.locator('[data-total="depth"]').inner_text()) >= 7
    assert not page.errors


def test_filter_shows_only_matching_queues(page, relay):
    prefix = unique("flt")
    first, second = make_queue(relay, f"{prefix}-a"), make_queue(relay, f"{prefix}-b")
    other = make_queue(relay)
    page.goto("/")
    page.get_by_label("Filter queues").fill(f"{prefix}-b")
    row(page, first).wait_for(state="detached")
    assert row(page, second).is_visible()
    assert row(page, other).count() == 0


def test_sort_by_depth_puts_the_deepest_first(page, relay):
    shallow, deep = make_queue(relay, unique("srt")), make_queue(relay, unique("srt"))
    publish(relay, deep, *[Message(body=b"x") for _ in range(5)])
    publish(relay, shallow, Message(body=b"x"))
    page.goto("/")
    page.get_by_role("link", name="Unprocessed").click()  # descending first
    page.wait_for_url("**sort=depth**")
    names = page.locator("#queue-table tr[data-queue]").evaluate_all(
        "rows => rows.map(r => r.dataset.queue)"
    )
    assert names.index(deep) < names.index(shallow)


def test_dead_letter_queues_are_highlighted(page, relay):
    dlq = make_queue(relay, unique("dlq"))
    source = make_queue(relay, dead_letter=dlq)
    relay.call(
        "selector_create", queue=source, when="match",
        match={"operator": "eq", "pattern": "never", "field": "address"},
        action="delete", enabled=True,
    )  # fmt: skip
    publish(relay, source, Message(address="elsewhere", body=b"lost"))
    page.goto("/")
    cell = row(page, dlq).locator('[data-field="depth"]')
    page.wait_for_function(
        "q => [...document.querySelectorAll('#queue-table tr.dlq')].some(r => r.dataset.queue === q"
        " && r.querySelector('[data-field=\"depth\"]').textContent.trim() === '1')",
        arg=dlq,
        timeout=15_000,
    )
    assert "alert" in cell.get_attribute("class")
    assert "dead letters" in row(page, dlq).inner_text()


def test_health_and_totals_are_shown(page):
    page.goto("/")
    health = page.get_by_label("Health")
    assert "Redis up" in health.inner_text()
    assert "Database up" in health.inner_text()
    assert page.locator('[data-total="queues"]').inner_text().isdigit()


def test_create_a_queue(page):
    name = unique("new")
    page.goto("/")
    page.get_by_text("Create a queue").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("History").fill("10")
    page.get_by_role("button", name="Create queue").click()
    page.wait_for_url(f"**/queues/{name}/")
    assert page.get_by_role("heading", name=f"Queue {name}").is_visible()


def test_it_passes_axe(page, relay):
    make_queue(relay)
    page.goto("/")
    assert axe_scan(page) == []
