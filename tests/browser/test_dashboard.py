"""The dashboard: queues with live numbers, totals, health, filter and sort."""

from __future__ import annotations

import re

from engine.message import Message
from tests.browser.conftest import axe_scan, make_queue, publish, unique, wait_for_snapshot


def row(page, queue):
    return page.locator(f'#queue-table tr[data-queue="{queue}"]')


def test_depth_changes_without_reload(page, relay, console):
    queue = make_queue(relay)  # no selectors: what is published waits, unprocessed
    page.goto(f"/?q={queue}")  # the dashboard is paged: search, as the session made many
    depth = row(page, queue).locator('[data-field="depth"]')
    assert depth.inner_text() == "0"
    page.evaluate("window.__sameDocument = true")
    with console.client() as api:  # through the HTTP API, as a program publishes
        answer = api.post(
            f"/api/queues/{queue}/publish-batch",
            json={"messages": [{"address": "a", "body": "x"} for _ in range(7)]},
        )
    assert answer.status_code == 202, answer.text
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
    page.wait_for_function(  # the published-rate line of the sparkline rose above zero
        "q => { const r = [...document.querySelectorAll('#queue-table tr[data-queue]')]"
        ".find(r => r.dataset.queue === q); const plot = r && r.querySelector('.spark')._plot;"
        " return plot && Math.max(...plot.data[1]) > 0; }",
        arg=queue,
        timeout=15_000,
    )
    # the totals of a searched page follow at the next refresh of the rows (up to 10 s)
    page.wait_for_function(
        "() => Number(document.querySelector('[data-total=\"depth\"]').textContent) >= 7",
        timeout=30_000,
    )
    assert not page.errors


def test_burst_before_the_monitor_connects_still_shows_a_rate(page, relay, console, redis_server):
    """The server's rate meter has no earlier reading of a queue it sees for the first time;
    the page has one, from the rendered row."""
    queue = make_queue(relay)
    held = []
    page.route_web_socket(
        re.compile(r"/ws/monitor/"), lambda ws: held.append(ws)
    )  # not connected yet
    page.goto(f"/?q={queue}")
    publish(relay, queue, *[Message(body=b"x") for _ in range(9)])
    wait_for_snapshot(redis_server, console, queue, published=9)  # it holds the burst
    assert len(held) == 1
    held[0].connect_to_server()
    page.wait_for_function(
        "q => { const r = [...document.querySelectorAll('#queue-table tr[data-queue]')]"
        ".find(r => r.dataset.queue === q); const plot = r && r.querySelector('.spark')._plot;"
        " return plot && Math.max(...plot.data[1]) > 0; }",
        arg=queue,
        timeout=15_000,
    )
    assert row(page, queue).locator('[data-field="depth"]').inner_text() == "9"
    assert not page.errors


def test_filter_shows_only_matching_queues(page, relay):
    prefix = unique("flt")
    first, second = make_queue(relay, f"{prefix}-a"), make_queue(relay, f"{prefix}-b")
    other = make_queue(relay)
    page.goto("/")
    page.get_by_label("Filter queues").fill(f"{prefix}-b")
    row(page, second).wait_for(state="visible")  # searched on the server: it comes back
    row(page, first).wait_for(state="detached")
    assert row(page, other).count() == 0


def test_a_refresh_answered_first_does_not_undo_the_filter(page, relay):
    """The table refreshes itself (a new queue, the poll) while the filter asks for rows too:
    the request sent last must win. A refresh sent just before the filter's request and
    answered first replaced the table, so the filter's answer went to a table no longer on
    the page and every queue stayed shown under a filled-in filter (the rare failure of the
    test above). Both requests are held here and answered in that order."""
    prefix = unique("late")
    first, second = make_queue(relay, f"{prefix}-a"), make_queue(relay, f"{prefix}-b")
    page.goto(f"/?q={prefix}")
    row(page, first).wait_for(state="visible")
    held = []
    page.route("**/dashboard/rows/**", lambda route: held.append(route))  # answered later
    page.evaluate("""() => {
        window.__rows = [];
        document.getElementById("queue-table").dataset.before = "1";
        document.body.addEventListener("htmx:xhr:abort", () => window.__rows.push("abort"));
        document.body.addEventListener("htmx:afterRequest", (e) => {
            if (e.detail.elt.id === "queue-filter") window.__rows.push("filtered");
        });
    }""")
    with page.expect_request("**/dashboard/rows/**"):  # the refresh (every queue)
        page.evaluate("htmx.trigger('#queue-table', 'refresh')")
    with page.expect_request(f"**q={prefix}-b**"):  # then the filter's
        page.get_by_label("Filter queues").fill(f"{prefix}-b")
    for _ in range(300):  # the route handler runs as the page's events are dispatched
        if len(held) == 2:
            break
        page.wait_for_timeout(50)
    refresh, filtered = held
    try:
        refresh.continue_()  # answered first
    except Exception:  # the page gave it up for the filter's (aborted)
        pass
    page.wait_for_function(  # shown, or given up
        "() => !document.getElementById('queue-table').dataset.before"
        " || window.__rows.includes('abort')",
        timeout=15_000,
    )
    filtered.continue_()
    page.wait_for_function("() => window.__rows.includes('filtered')", timeout=15_000)
    row(page, second).wait_for(state="visible")
    assert row(page, first).count() == 0


def test_sort_by_depth_puts_the_deepest_first(page, relay, console, redis_server):
    prefix = unique("srt")
    shallow, deep = make_queue(relay, f"{prefix}-a"), make_queue(relay, f"{prefix}-b")
    publish(relay, deep, *[Message(body=b"x") for _ in range(5)])
    publish(relay, shallow, Message(body=b"x"))
    # the dashboard sorts the router's snapshot (taken about twice a second): loaded before
    # it held both publishes, it sorted two empty queues by name
    wait_for_snapshot(redis_server, console, deep, published=5)
    wait_for_snapshot(redis_server, console, shallow, published=1)
    page.goto(f"/?q={prefix}")  # paged: other tests' queues could push these off page 1
    page.get_by_role("link", name="Unprocessed").click()  # descending first
    page.wait_for_url("**sort=depth**")
    names = page.locator("#queue-table tr[data-queue]").evaluate_all(
        "rows => rows.map(r => r.dataset.queue)"
    )
    assert names.index(deep) < names.index(shallow)


def test_dead_letter_queues_are_highlighted(page, relay):
    dlq = make_queue(relay, unique("dlq"))
    source = make_queue(relay, f"{dlq}-source", dead_letter=dlq)  # one search finds both
    relay.call(
        "selector_create", queue=source, when="match",
        match={"operator": "eq", "pattern": "never", "field": "address"},
        action="delete", enabled=True,
    )  # fmt: skip
    publish(relay, source, Message(address="elsewhere", body=b"lost"))
    page.goto(f"/?q={dlq}")
    publish(relay, source, Message(address="elsewhere", body=b"lost too"))
    cell = row(page, dlq).locator('[data-field="depth"]')
    page.wait_for_function(
        "q => [...document.querySelectorAll('#queue-table tr.dlq')].some(r => r.dataset.queue === q"
        " && r.querySelector('[data-field=\"depth\"]').textContent.trim() === '2')",
        arg=dlq,
        timeout=15_000,
    )
    assert "alert" in cell.get_attribute("class")
    assert "dead letters" in row(page, dlq).inner_text()
    # and the source's dead-lettered count follows live too (the page loaded before)
    page.wait_for_function(
        "q => [...document.querySelectorAll('#queue-table tr[data-queue]')].some(r =>"
        " r.dataset.queue === q && r.querySelector('[data-field=\"dead_lettered\"]')"
        ".textContent.trim() === '2')",
        arg=source,
        timeout=15_000,
    )


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
