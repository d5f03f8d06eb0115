"""Security: POSTs without a CSRF token are refused and change nothing; a message made of
markup renders inert, as text, on every page that shows it. (Logged-out pages redirecting
to login: test_login.py.)"""

from __future__ import annotations

import pytest

from engine.message import Message
from tests.browser.conftest import make_queue, publish, unique

SCRIPT = '<script>alert("xss-script")</script>'
IMG = '"><img src=x onerror=alert("xss-img")>'
EVIL_ADDRESS = f"evil.{SCRIPT}{IMG}"
KEY = 'k"><img/src=x/onerror=alert("xss-key")>'  # header names hold no whitespace
EVIL_HEADERS = {"note": SCRIPT, "x-img": IMG, KEY: "v"}
EVIL_BODY = f"body {SCRIPT} {IMG}"


def watch(page) -> list[str]:
    """Dialogs the page opens (an alert would mean the markup ran)."""
    seen: list[str] = []

    def on_dialog(dialog):
        seen.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return seen


def assert_inert(page, where, *texts: str) -> None:
    """No element came from the markup (the console draws no images and no inline script
    of this kind) and the markup is shown as text."""
    made = page.evaluate(
        "() => ({images: document.querySelectorAll('img, [onerror]').length,"
        " scripts: [...document.scripts].filter(s => s.textContent.includes('xss')).length})"
    )
    assert made == {"images": 0, "scripts": 0}, where
    text = page.locator(where).inner_text()
    for expected in texts:
        assert expected in text, (where, expected)


def test_markup_in_a_message_renders_inert_everywhere(page, relay):
    dialogs = watch(page)
    evil = Message(address=EVIL_ADDRESS, headers=EVIL_HEADERS, body=EVIL_BODY.encode())
    # a queue keeping history, copying to one delivering to a destination (the dashboard's
    # recent deliveries)
    queue, delivering = make_queue(relay, history=100), make_queue(relay)
    relay.call("selector_create", queue=queue, when="always", action="copy",
               target=delivering, enabled=True)  # fmt: skip
    relay.call("selector_create", queue=delivering, when="always", action="deliver",
               target=unique("app"), enabled=True)  # fmt: skip
    # and a queue dead-lettering it
    dlq = make_queue(relay, unique("dlq"))
    lost = make_queue(relay, dead_letter=dlq)
    relay.call("selector_create", queue=lost, when="match", action="delete", enabled=True,
               match={"operator": "eq", "pattern": "never", "field": "address"})  # fmt: skip

    page.goto("/")
    publish(relay, queue, evil)
    publish(relay, lost, evil)
    page.locator("#recent").get_by_text(EVIL_ADDRESS).wait_for(timeout=15_000)
    assert_inert(page, "#recent", EVIL_ADDRESS)

    page.goto(f"/queues/{queue}/")  # the history browser
    assert_inert(page, "#history", EVIL_ADDRESS, KEY, EVIL_BODY)
    page.get_by_label("Filter", exact=True).fill("note is not null")
    page.get_by_role("button", name="Show").click()
    page.get_by_text("1 matching the filter").wait_for()
    assert_inert(page, "#history", EVIL_ADDRESS, EVIL_BODY)

    for view in ("text", "hex"):  # message detail
        page.goto(f"/queues/{queue}/messages/1/?view={view}")
        assert_inert(page, "main", EVIL_ADDRESS, IMG, KEY)
        if view == "text":
            assert page.locator("#message-body").inner_text() == EVIL_BODY

    page.goto("/dead-letters/")
    assert_inert(page, "main", EVIL_ADDRESS, EVIL_BODY)

    page.goto(f"/queues/{queue}/selectors/new/")  # the selector preview
    page.locator("input[name=when][value=always]").check()
    page.get_by_label("DO").select_option("copy")
    page.get_by_label("target").fill(unique("somewhere"))
    page.get_by_role("button", name="Preview against recent messages").click()
    page.locator("#preview tbody tr").first.wait_for()
    assert_inert(page, "#preview", EVIL_ADDRESS, EVIL_BODY)

    page.goto("/topology/")  # names and numbers only, but it must not choke either
    page.wait_for_function("() => document.getElementById('cy').dataset.ready === 'yes'")
    assert dialogs == []
    assert not page.errors


def csrf_cases(relay):
    """(path, form, check) for POSTs that change something; check() is True while nothing
    changed."""
    queue = make_queue(relay)
    publish(relay, queue, Message(body=b"keep me"))
    dlq = make_queue(relay, unique("dlq"))
    source = make_queue(relay, dead_letter=dlq)
    relay.call("selector_create", queue=source, when="match", action="delete", enabled=True,
               match={"operator": "eq", "pattern": "never", "field": "address"})  # fmt: skip
    publish(relay, source, Message(address="x", body=b"dead"))
    new_name = unique("csrf")
    names = lambda: {q["name"] for q in relay.call("queues")}  # noqa: E731
    return [
        ("/queues/new/", {"name": new_name, "history": "0"}, lambda: new_name not in names()),
        (f"/queues/{queue}/purge/", {"confirm": queue},
         lambda: relay.call("queue_get", name=queue)["depth"] == 1),
        (f"/queues/{queue}/settings/", {"limit": "3", "history": "3"},
         lambda: relay.call("queue_get", name=queue)["history"] == 0),
        (f"/queues/{queue}/publish/", {"address": "a", "body": "b", "headers": ""},
         lambda: relay.call("queue_get", name=queue)["depth"] == 1),
        (f"/queues/{queue}/selectors/new/", {"when": "always", "action": "delete", "credit": "-1",
                                             "start": "current"},
         lambda: relay.call("selectors", queue=queue) == []),
        ("/dead-letters/act/", {"action": "delete", "letter": f"{dlq}|1"},
         lambda: relay.call("queue_get", name=dlq)["depth"] == 1),
        (f"/queues/{queue}/delete/", {}, lambda: queue in names()),
        ("/patterns/new/parrot/", {"name": "p", "router": new_name, "topic": "#"},
         lambda: new_name not in names()),
    ]  # fmt: skip


@pytest.mark.parametrize("token", ["missing", "forged"])
def test_posts_without_the_csrf_token_are_refused(page, relay, token):
    cases = csrf_cases(relay)
    page.goto("/")  # the session cookie and the CSRF cookie are set
    forged = {"csrfmiddlewaretoken": "x" * 64} if token == "forged" else {}
    for path, form, unchanged in cases:
        answer = page.request.post(path, form={**form, **forged}, max_redirects=0)
        assert answer.status == 403, (path, answer.status)
        assert "CSRF" in answer.text(), path
        assert unchanged(), path
    # the same request with the page's token goes through: the token was all that was missing
    path, form, unchanged = cases[0]
    [cookie] = [c for c in page.context.cookies() if c["name"] == "csrftoken"]
    answer = page.request.post(
        path, form=form, headers={"X-CSRFToken": cookie["value"], "Referer": page.url},
        max_redirects=0,
    )  # fmt: skip
    assert answer.status == 302 and not unchanged()
