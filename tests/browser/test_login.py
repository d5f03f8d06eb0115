"""Login: every console page needs it; the console has its own login page."""

from __future__ import annotations

import pytest

from tests.browser.conftest import log_in, make_queue

PAGES = [
    "/", "/topology/", "/patterns/", "/patterns/new/parrot/", "/dead-letters/", "/audit/",
    "/tokens/", "/queues/{queue}/", "/queues/{queue}/selectors/new/",
    "/queues/{queue}/messages/1/", "/queues/{queue}/purge/", "/queues/{queue}/delete/",
    "/patterns/new/wolfpack/", "/dashboard/rows/", "/topology/graph/",
]  # fmt: skip


@pytest.mark.parametrize("path", PAGES)
def test_logged_out_pages_redirect_to_login(anonymous, relay, path):
    queue = make_queue(relay) if "{queue}" in path else ""
    target = path.format(queue=queue)
    anonymous.goto(target)
    assert anonymous.url.split("?")[0].endswith("/login/")
    assert "next=" in anonymous.url
    assert anonymous.get_by_role("heading", name="Log in to Xump").is_visible()


def test_login_takes_the_user_where_they_were_going(anonymous, relay):
    queue = make_queue(relay)
    anonymous.goto(f"/queues/{queue}/")
    log_in(anonymous)
    anonymous.wait_for_url(f"**/queues/{queue}/")
    assert anonymous.get_by_role("heading", name=f"Queue {queue}").is_visible()


def test_wrong_password_is_refused(anonymous):
    anonymous.goto("/login/")
    anonymous.get_by_label("User name").fill("admin")
    anonymous.get_by_label("Password").fill("not-the-password")
    anonymous.get_by_role("button", name="Log in").click()
    assert anonymous.get_by_role("alert").inner_text().startswith("Your user name and password")
    anonymous.goto("/")
    assert anonymous.url.split("?")[0].endswith("/login/")


def test_logging_out_ends_the_session(browser, console):
    # a session of its own: logging out ends the shared login_state's session for everyone
    context = browser.new_context(base_url=console.url)
    page = context.new_page()
    try:
        page.goto("/")  # to the login page, and back here once logged in
        log_in(page)
        page.wait_for_url(console.url + "/")
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url("**/login/")
        page.goto("/tokens/")
        assert page.url.split("?")[0].endswith("/login/")
    finally:
        context.close()
