"""A console that scales (issue 15): the dashboard paged and searched on the server with
live frames for the visible page only, the topology of many unconnected queues laid out in
a grid, the queue page's charts of the last hour, and /api/docs with no network."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlparse

import redis

from engine.message import Message
from tests.browser.conftest import (
    make_queue,
    publish,
    topology_layout,
    unique,
    wait_for_snapshot,
)
from tests.web.conftest import create_queues
from xumpweb import series
from xumpweb.runtime import keys

ROWS = "rows => rows.map(r => r.dataset.queue)"


def shown(page) -> list[str]:
    return page.locator("#queue-table tr[data-queue]").evaluate_all(ROWS)


def wait_for_frame(page, frames: list[dict], check, within: float = 30.0) -> dict:
    """The first monitor frame received (so far or within `within` s) for which check holds;
    every frame of a view carries only the queues of that view. Waits in page.wait_for_timeout:
    Playwright's sync API hands events (received frames) over only inside its own calls."""
    deadline = time.monotonic() + within
    seen = 0
    while True:
        for frame in frames[seen:]:
            if check(frame):
                return frame
        seen = len(frames)
        last = [(f.get("_socket"), f.get("view"), [q["name"] for q in f.get("queues", [])][:3])
                for f in frames[-3:]]  # fmt: skip
        assert time.monotonic() < deadline, f"no such monitor frame came; the last: {last}"
        page.wait_for_timeout(50)


def test_the_dashboard_pages_and_searches_on_the_server_with_frames_for_the_page_only(
    page, relay, console, redis_server
):
    prefix = unique("pg")
    names = [f"{prefix}-{n:03d}" for n in range(60)]
    create_queues(redis_server.url, console.env["XUMP_STORE"], names, threads=4)
    frames: list[dict] = []  # every monitor frame, with "_socket": which connection
    sent: list[dict] = []  # the page's watch frames, likewise
    sockets = iter(range(1000))

    def watch_socket(ws) -> None:
        if "/ws/monitor/" not in ws.url:
            return
        number = next(sockets)
        ws.on("framereceived", lambda text: frames.append({**json.loads(text), "_socket": number}))
        ws.on("framesent", lambda text: sent.append({**json.loads(text), "_socket": number}))

    page.on("websocket", watch_socket)
    page.goto(f"/?q={prefix}")
    assert shown(page) == names[:50]
    # the live feed is open (it told the server which queues the page shows)
    page.locator("#live-state.on").wait_for(timeout=60_000)
    assert "1\u201350 of 60 matching" in page.locator("[data-shown]").inner_text()
    # the page told the server what it shows; frames for that view carry exactly those rows
    frame = wait_for_frame(page, frames, lambda f: f.get("view") is not None
                           and [q["name"] for q in f["queues"]] == names[:50])  # fmt: skip
    # totals still count every queue (once the router's snapshot holds the 60)
    wait_for_frame(
        page, frames, lambda f: f.get("view") == frame["view"] and f["totals"]["queues"] >= 60
    )
    assert sent[-1] == {"type": "watch", "queues": names[:50], "view": frame["view"],
                        "_socket": frame["_socket"]}  # fmt: skip

    page.get_by_role("link", name="Next →").click()
    page.wait_for_url("**page=2**")
    page.locator("#live-state.on").wait_for(timeout=60_000)
    assert shown(page) == names[50:]
    assert page.get_by_text("page 2 of 2").is_visible()
    # (a snapshot the router wrote while the queues were being made holds some of them
    # only: the frames of this view carry those of its rows the snapshot holds, no others)
    frame = wait_for_frame(page, frames, lambda f: f.get("view") and f["queues"]
                           and [q["name"] for q in f["queues"]] == names[50:])  # fmt: skip
    assert all(q["name"] in names[50:] for f in frames
               if (f["_socket"], f.get("view")) == (frame["_socket"], frame["view"])
               for q in f["queues"])  # fmt: skip
    # live numbers on the page shown
    publish(relay, names[55], *[Message(body=b"x") for _ in range(3)])
    page.wait_for_function(
        "q => [...document.querySelectorAll('#queue-table tr[data-queue]')].some(r =>"
        " r.dataset.queue === q && r.querySelector('[data-field=\"depth\"]').textContent === '3')",
        arg=names[55],
    )

    # the search runs over every queue, not the page shown: back to page 1, then search
    page.goto(f"/?q={prefix}")
    page.get_by_label("Filter queues").fill(f"{prefix}-05")
    page.wait_for_function(
        "n => document.querySelectorAll('#queue-table tr[data-queue]').length === n", arg=10
    )
    assert shown(page) == names[50:]
    assert page.locator("nav.pager").count() == 0
    frame = wait_for_frame(page, frames, lambda f: f.get("view") and f["queues"]
                           and f["queues"][0]["name"] == names[50])  # fmt: skip
    assert [q["name"] for q in frame["queues"]] == names[50:]

    page.select_option("#per", "25")
    page.wait_for_function(
        "n => document.querySelectorAll('#queue-table tr[data-queue]').length === n", arg=10
    )
    page.get_by_label("Filter queues").fill(prefix)
    page.wait_for_function(
        "n => document.querySelectorAll('#queue-table tr[data-queue]').length === n", arg=25
    )
    assert shown(page) == names[:25]
    assert page.get_by_text("page 1 of 3").is_visible()
    # every frame sent for a view carried only queues of that view
    watched = {(w["_socket"], w["view"]): set(w["queues"]) for w in sent}
    assert len(watched) >= 4
    for frame in frames:
        if frame.get("view") is not None:
            names_sent = {q["name"] for q in frame["queues"]}
            assert names_sent <= watched[frame["_socket"], frame["view"]]
    assert not page.errors


def test_two_hundred_unconnected_queues_are_laid_out_in_a_grid(page, console, redis_server):
    prefix = unique("lone")
    names = [f"{prefix}-{n:03d}" for n in range(200)]
    create_queues(redis_server.url, console.env["XUMP_STORE"], names, threads=4)
    page.goto("/topology/")
    page.wait_for_function(
        "() => document.getElementById('cy').dataset.ready === 'yes'", timeout=30_000
    )
    found = topology_layout(page, names, labels=True)
    assert found["shown"] == 200
    assert found["overlaps"] == 0
    assert found["columns"] >= 8, found  # a grid, not one long column
    assert 0.5 <= found["width"] / found["height"] <= 5, found  # a block, not a strip
    assert not page.errors


def test_the_queue_page_charts_depth_and_rates_over_the_last_hour(
    page, relay, console, redis_server
):
    queue = make_queue(relay)
    prefix = keys(console.env["XUMP_STORE"])["series"]
    now = time.time()
    with redis.Redis.from_url(redis_server.url) as client:
        # an hour of history as the router samples it: 5 published/s, 2 delivered/s
        for n in range(359):
            taken = now - (359 - n) * series.EVERY
            stats = {"published": 50 * n, "delivered": 20 * n, "confirmed": 20 * n}
            series.record(client, prefix, [{"name": queue, "depth": n, "stats": stats}], taken)
    # the chart ends with the present from the router's snapshot (taken about twice a
    # second): loaded before the snapshot held the new queue, it showed 359 samples
    wait_for_snapshot(redis_server, console, queue)
    page.goto(f"/queues/{queue}/")
    section = page.locator("#queue-charts")
    section.get_by_text(re.compile(r"^\d+ samples, the newest at \d\d:\d\d:\d\d UTC$")).wait_for()
    found = page.evaluate(
        """() => {
          const d = window.xumpCharts.depth, r = window.xumpCharts.rates;
          return {times: d.data[0].length, depth: d.data[1].slice(0, 3),
                  published: r.data[1][100], delivered: r.data[2][100],
                  ticks: d.axes[0]._values || [], rateTicks: r.axes[0]._values || [],
                  width: d.root.getBoundingClientRect().width,
                  box: document.getElementById('depth-chart').getBoundingClientRect().width};
        }"""
    )
    assert found["times"] >= 360  # an hour of samples and the present
    assert found["depth"] == [0, 1, 2]
    assert found["published"] == 5 and found["delivered"] == 2
    assert found["ticks"] and all(re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", t)
                                  for t in found["ticks"]), found["ticks"]  # fmt: skip
    assert found["width"] <= found["box"] + 1  # not wider than its place
    assert not page.errors


def test_the_router_samples_each_queue_for_the_charts(relay, console, redis_server):
    queue = make_queue(relay)
    publish(relay, queue, *[Message(body=b"x") for _ in range(4)])
    prefix = keys(console.env["XUMP_STORE"])["series"]
    deadline = time.monotonic() + 3 * series.EVERY
    with redis.Redis.from_url(redis_server.url) as client:
        while True:
            found = series.read(client, prefix, queue)
            if found["depth"] and found["depth"][-1] == 4:
                break
            assert time.monotonic() < deadline, f"no sample with depth 4 came: {found}"
            time.sleep(0.2)
        assert found["time"][-1] <= time.time()


def test_the_api_docs_render_with_no_network(browser, console, login_state):
    context = browser.new_context(base_url=console.url, storage_state=login_state)
    asked_outside: list[str] = []

    def only_local(route) -> None:
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            asked_outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    try:
        page.goto("/api/docs")
        page.locator(".swagger-ui .opblock").first.wait_for(timeout=15_000)
        assert page.locator(".swagger-ui .opblock").count() > 10
        assert asked_outside == []
    finally:
        context.close()
