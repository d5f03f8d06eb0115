"""The open dashboard shows outages: Redis hanging makes the feed stale; Redis killed
under it turns the Redis pill "down since HH:MM:SS UTC" and the feed says so; Redis back,
the page is live again; the web server stopped, the page says the live feed is lost and its
pills are stale. Waits are for the text, with generous deadlines (the page itself is bound
to about 2 s)."""

from __future__ import annotations

import os
import re
import signal

import pytest

from tests.browser.conftest import log_in, shot_path
from tests.web.conftest import service_with_own_redis

SINCE = re.compile(r"since \d\d:\d\d:\d\d UTC")


@pytest.fixture
def lonely(tmp_path):
    """A service with a redis-server of its own, both of which the test may stop."""
    yield from service_with_own_redis(tmp_path)


def test_the_dashboard_shows_redis_down_then_back_then_the_server_gone(browser, lonely, request):
    service, redis_server = lonely
    context = browser.new_context(base_url=service.url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/")
        log_in(page)
        page.wait_for_url(service.url + "/")
        feed = page.locator("#live-state")
        redis_pill = page.locator('#health [data-pill="redis"]')
        feed.filter(has_text=re.compile(r"^live$")).wait_for()
        assert redis_pill.inner_text() == "Redis up"

        # Redis hangs (stopped, not dead): the server's reads hang, no frame comes
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            page.locator("#live-state.lost", has_text="stale: no live frame since").wait_for()
            page.locator('#health [data-pill="redis"].stale', has_text="stale since").wait_for()
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        feed.filter(has_text=re.compile(r"^live$")).wait_for()
        page.locator('#health [data-pill="redis"].ok', has_text="Redis up").wait_for()

        redis_server.kill()
        page.locator('#health [data-pill="redis"].bad', has_text="Redis down since").wait_for()
        assert SINCE.search(redis_pill.inner_text())
        page.locator('#health [data-pill="routing"].bad', has_text="Routing stalled").wait_for()
        feed.filter(has_text="Redis down since").wait_for()
        assert page.locator("#health .pill.ok").all_inner_texts() == ["Database up"]
        page.screenshot(path=str(shot_path(request.node.name + "-redis-down")), full_page=True)

        redis_server.start()  # the same port and AOF
        page.locator('#health [data-pill="redis"].ok', has_text="Redis up").wait_for()
        page.locator('#health [data-pill="routing"].ok').wait_for()
        feed.filter(has_text=re.compile(r"^live$")).wait_for()

        service.stop("server")
        page.locator("#live-state.lost", has_text="live feed lost since").wait_for()
        assert SINCE.search(feed.inner_text())
        assert "web server does not answer" in feed.inner_text()
        page.locator('#health [data-pill="redis"].stale', has_text="stale since").wait_for()
        assert page.locator("#health .pill.ok").count() == 0  # nothing green stays
        page.screenshot(path=str(shot_path(request.node.name + "-server-gone")), full_page=True)
    finally:
        context.close()
