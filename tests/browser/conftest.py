"""The console in a real browser: Debian's headless Chromium driven by Playwright (sync
API) against the service in a subprocess (tests/web/conftest.py's start_service, routing
inline, on the session's private redis-server).

Tests set up wiring and traffic as programs would: through the store's relay (the same
inbox the HTTP API and the console publish to, and the same operations they call). Each
test saves a screenshot under tests/browser/screenshots/ (git-ignored) for a person to look
at; `axe_scan` runs axe-core (vendored under vendor/, for the tests only) on a page.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from engine.message import Message
from engine.relay import RelayClient
from tests.web.conftest import start_service, unique
from xumpweb.runtime import keys

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SHOTS = HERE / "screenshots"
AXE = HERE / "vendor" / "axe-core-4.14.1.min.js"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip

__all__ = ["unique"]


@pytest.fixture(scope="session")
def console(redis_server, tmp_path_factory):
    """The service for the browser tests (one per session, names made unique per test)."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("console"), "inline")
    yield running
    running.close()


@pytest.fixture(scope="session")
def relay(console, redis_server) -> Iterator[RelayClient]:
    client = RelayClient(redis_server.url, console.env["XUMP_STORE"])
    yield client
    client.close()


@pytest.fixture(scope="session")
def browser():
    if shutil.which(CHROMIUM) is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def login_state(browser, console) -> dict[str, Any]:
    """The admin's logged-in cookies, made once through the login page."""
    context = browser.new_context(base_url=console.url)
    page = context.new_page()
    page.goto("/login/")
    log_in(page)
    page.wait_for_url(console.url + "/")
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(browser, console, login_state, request):
    """A logged-in page; its screenshot is saved when the test ends."""
    with open_page(
        browser, console.url, request, storage_state=login_state, viewport=WIDE
    ) as opened:
        yield opened


@pytest.fixture
def anonymous(browser, console, request):
    """A page of a visitor who has not logged in; its screenshot is saved too."""
    with open_page(browser, console.url, request) as opened:
        yield opened


WIDE = {"width": 1400, "height": 900}  # the viewport of the logged-in pages


@contextmanager
def open_page(browser, base_url: str, request, **options: Any) -> Iterator[Any]:
    """A page in a browser context of its own (`options`: new_context's, e.g. storage_state
    or viewport), its JavaScript errors in `page.errors`; on leaving the block its
    screenshot is saved (named for the test) and the context closed."""
    context = browser.new_context(base_url=base_url, **options)
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.errors = errors
    try:
        yield opened
    finally:
        try:
            opened.screenshot(path=str(shot_path(request.node.name)), full_page=True)
        finally:
            context.close()


def shot_path(test_name: str) -> Path:
    """Where a test's screenshot goes (its parameters made safe for a file name)."""
    SHOTS.mkdir(exist_ok=True)
    return SHOTS / (re.sub(r"[^\w.-]+", "_", test_name).strip("_") + ".png")


def log_in(page, user: str = "admin", password: str = "admin-password") -> None:
    """Fill in and send the login form the page shows (it must be showing it)."""
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def axe_scan(page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    # through the DevTools protocol: a <script> tag of inline text would break the page's
    # Content-Security-Policy (script-src 'self')
    page.evaluate(AXE.read_text() + "\n;undefined")
    found = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


_CSP_WATCH = """() => {
  window.__violations = [];
  document.addEventListener('securitypolicyviolation', e => window.__violations.push(
    e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile
    + ':' + e.lineNumber));
}"""


def csp_visit(page, path: str) -> Callable[[], list[str]]:
    """Open `path` watching the Content-Security-Policy (xumpweb/security.py): the header
    must be sent, and the page's own work must have run (the dashboard's live feed and an
    htmx swap, the topology drawn, Swagger UI's API); returns a function that says what the
    page broke (`securitypolicyviolation` events and CSP console errors), read when the
    caller is done with the page."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(script=f"({_CSP_WATCH})()")
    answer = page.goto(path)
    assert answer.status < 400, (path, answer.status)
    policy = answer.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "'unsafe-eval'" not in policy, policy
    page.wait_for_load_state("load")
    if path == "/topology/":
        page.wait_for_function("() => window.xumpTopology && window.xumpTopology.nodes().length")
    if path == "/":  # the live feed and a poll of the rows (htmx swaps) have run
        page.locator("#live-state", has_text="live").wait_for()
        page.evaluate("() => htmx.trigger('#queue-table', 'refresh')")
        page.wait_for_function("() => !document.querySelector('#queue-table.htmx-request')")
    if path == "/api/docs":  # Swagger UI drew the API, not a blank page
        page.get_by_text("/api/queues/{queue}/publish", exact=True).first.wait_for()

    def broken() -> list[str]:
        found = page.evaluate("() => window.__violations")
        return found + [e for e in errors if "Content Security Policy" in e]

    return broken


def make_queue(relay: RelayClient, name: str | None = None, **settings: Any) -> str:
    name = name or unique("q")
    relay.call("queue_create", name=name, **settings)
    return name


def publish(relay: RelayClient, queue: str, *messages: Message) -> list[str]:
    mids = relay.publish_many(queue, list(messages))
    relay.call("stats", queue=queue)  # answered after the publishes were applied
    return mids


_LAYOUT = """([names, labels]) => {
  const cy = window.xumpTopology;
  const nodes = names.map(n => cy.getElementById('q:' + n)).filter(n => n.length);
  const boxes = nodes.map(n => n.boundingBox({includeLabels: labels}));
  let overlaps = 0;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.x1 < b.x2 - 1 && b.x1 < a.x2 - 1 && a.y1 < b.y2 - 1 && b.y1 < a.y2 - 1)
      overlaps++;
  }
  const all = nodes.length ? nodes.reduce((a, n) => a.union(n))
    .boundingBox({includeLabels: labels}) : {w: 0, h: 0};
  return {shown: boxes.length, overlaps: overlaps,
          columns: new Set(boxes.map(b => Math.round(b.x1))).size, width: all.w, height: all.h,
          ms: +document.getElementById('cy').dataset.layoutMs};
}"""


def topology_layout(page, names: list[str], labels: bool) -> dict[str, Any]:
    """How the topology page laid out the named queues: how many it shows, how many pairs of
    their boxes (with their labels, or not) overlap by more than a pixel, in how many
    columns, the `width` and `height` of the box around them all, and the layout's `ms`."""
    return page.evaluate(_LAYOUT, [names, labels])


def in_snapshot(redis_server, console, queue: str) -> dict[str, Any] | None:
    """The queue's entry in the router's latest stats snapshot (the dashboard's, the
    monitor's and the charts' source), or None while the snapshot does not hold it."""
    with redis.Redis.from_url(redis_server.url) as client:
        raw = client.get(keys(console.env["XUMP_STORE"])["snapshot"])
    found = json.loads(raw) if raw else {"queues": []}
    return next((q for q in found["queues"] if q["name"] == queue), None)


def wait_for_snapshot(redis_server, console, queue: str, published: int = 0) -> None:
    """Wait until the router's snapshot (taken about twice a second) holds the queue with at
    least `published` messages published: pages drawn from it before then do not show them."""
    deadline = time.monotonic() + 30
    while True:
        entry = in_snapshot(redis_server, console, queue)
        if entry is not None and entry["stats"].get("published", 0) >= published:
            return
        assert time.monotonic() < deadline, f"the router's snapshot never held {queue}"
        time.sleep(0.05)
