"""What each role sees on the queue page: a viewer reads it with no publish, purge, delete
or selector buttons; an operator granted the queue's glob has them (xumpweb/access.py)."""

from __future__ import annotations

import pytest

from engine.message import Message
from tests.browser.conftest import log_in, make_queue, publish, shot_path, unique

PASSWORD = "role-password-1"


@pytest.fixture(scope="module")
def people(console) -> dict[str, str]:
    """A viewer and an operator granted `roles-*`, by user name."""
    names = {"viewer": unique("viewer"), "operator": unique("operator")}
    made = console.manage("shell", "-c", (
        "from django.contrib.auth.models import Group, User\n"
        "from xumpweb.wiring.models import QueueGrant\n"
        f"for role, name in {names!r}.items():\n"
        f"    user = User.objects.create_user(name, password={PASSWORD!r})\n"
        "    user.groups.add(Group.objects.get(name=role))\n"
        f"QueueGrant.objects.create(user=User.objects.get(username={names['operator']!r}),\n"
        "    queues='roles-*', rights=['publish', 'consume', 'manage'])"))  # fmt: skip
    assert made.returncode == 0, made.stderr
    return names


def open_as(browser, console, name: str):
    context = browser.new_context(base_url=console.url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto("/login/")
    log_in(page, name, PASSWORD)
    page.wait_for_url(console.url + "/")
    return context, page


ACTIONS = ["New selector", "Publish", "Save settings", "Purge waiting messages…",
           "Delete queue…"]  # fmt: skip


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_the_queue_page_shows_only_the_actions_the_role_allows(
    browser, console, relay, people, role
):
    queue = make_queue(relay, unique("roles"), history=5)
    relay.call("selector_create", queue=queue, when="always", action="delete")
    publish(relay, queue, Message(address="a", body=b"held"))
    context, page = open_as(browser, console, people[role])
    try:
        page.goto(f"/queues/{queue}/")
        page.get_by_role("heading", name=f"Queue {queue}").wait_for()
        assert page.get_by_text("held").count() >= 1  # both read the queue
        shown = {
            action: page.get_by_role("button", name=action).count()
            + page.get_by_role("link", name=action).count()
            for action in ACTIONS
        }
        expected = 0 if role == "viewer" else 1
        assert shown == dict.fromkeys(ACTIONS, expected), shown
        # the selector's row: Edit and Enable / Delete for the operator, View for the viewer
        row = page.locator("tbody tr").first
        assert row.get_by_role("link", name="View").count() == (role == "viewer")
        assert row.get_by_role("button", name="Enable selector 1").count() == (role != "viewer")
        page.screenshot(path=str(shot_path(f"roles_queue_page_{role}")), full_page=True)
        # and what is hidden is refused too
        [csrf] = [c["value"] for c in context.cookies() if c["name"] == "csrftoken"]
        answer = page.request.post(f"/queues/{queue}/purge/", form={"confirm": queue},
                                   headers={"X-CSRFToken": csrf}, max_redirects=0)  # fmt: skip
        assert answer.status == (403 if role == "viewer" else 302)
        assert relay.call("queue_get", name=queue)["depth"] == (1 if role == "viewer" else 0)
    finally:
        context.close()
