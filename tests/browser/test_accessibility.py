"""Accessibility smoke over every console page: every form field has a label and axe-core
finds no serious or critical violation; keyboard use: the skip link, visible focus and a
form filled in and sent with the keyboard alone."""

from __future__ import annotations

import pytest

from engine.message import Message
from tests.browser.conftest import axe_scan, csp_visit, make_queue, publish, unique

PAGES = [
    "/", "/queues/{queue}/", "/queues/{queue}/?filter=priority+%3E%3E+1",
    "/queues/{queue}/messages/1/", "/queues/{queue}/messages/1/?view=json",
    "/queues/{queue}/messages/1/?view=hex", "/queues/{queue}/selectors/new/",
    "/queues/{queue}/selectors/1/", "/queues/{queue}/selectors/1/delete/",
    "/queues/{queue}/purge/", "/queues/{queue}/delete/", "/queues/{queue}/operate/",
    "/consumers/", "/patterns/",
    "/patterns/new/housecat/", "/patterns/new/parrot/", "/patterns/new/wolfpack/",
    "/patterns/{pattern}/delete/", "/dead-letters/", "/topology/", "/audit/", "/tokens/",
    "/messages/trace/", "/messages/trace/?mid=nope-1",
]  # fmt: skip

UNLABELLED = """() => [...document.querySelectorAll(
    'input:not([type=hidden]):not([type=submit]):not([type=button]), select, textarea')]
  .filter(el => !((el.labels && [...el.labels].some(l => l.textContent.trim()))
                  || (el.getAttribute('aria-label') || '').trim()
                  || el.getAttribute('aria-labelledby')))
  .map(el => el.outerHTML.slice(0, 120))"""


@pytest.fixture(scope="module")
def wiring(relay, console):
    """A queue with history, a selector, a JSON message, a dead letter, a pattern."""
    dlq = make_queue(relay, unique("dlq"))
    queue = make_queue(relay, history=100, dead_letter=dlq)
    sink = make_queue(relay)
    relay.call("selector_create", queue=queue, when="match", action="copy", target=sink,
               match={"operator": "topic", "pattern": "orders.#", "field": "address"},
               enabled=True)  # fmt: skip
    publish(relay, queue, Message(address="orders.eu", headers={"priority": 3},
                                  body=b'{"order": 1}'),
            Message(address="returns", body=b"nobody takes this"))  # fmt: skip
    with console.client() as api:
        made = api.post(
            "/api/patterns",
            json={
                "kind": "parrot",
                "name": unique("sub"),
                "router": unique("news"),
                "topic": "a.#",
            },
        )
    assert made.status_code == 201, made.text
    return {"queue": queue, "pattern": made.json()["id"]}


@pytest.mark.parametrize("path", PAGES)
def test_every_field_is_labelled_axe_finds_nothing_serious_and_the_csp_holds(page, wiring, path):
    """One visit a page: its labels, axe-core, and its Content-Security-Policy (the header
    sent and nothing broken while the page did its work: test_csp.py has the rest)."""
    broken = csp_visit(page, path.format(**wiring))
    assert page.locator("h1").count() == 1
    if path == "/topology/":
        page.wait_for_function("() => document.getElementById('cy').dataset.ready === 'yes'")
    page.wait_for_load_state("networkidle")  # htmx's requests on load have been answered
    assert page.evaluate(UNLABELLED) == []
    assert axe_scan(page) == []
    assert broken() == []
    assert not page.errors


def test_the_login_page_too(anonymous):
    anonymous.goto("/login/")
    assert anonymous.evaluate(UNLABELLED) == []
    assert axe_scan(anonymous) == []


def focused(page) -> dict:
    return page.evaluate(
        "() => { const el = document.activeElement, style = getComputedStyle(el);"
        " return {tag: el.tagName, id: el.id, name: el.name || '', text: el.textContent.trim(),"
        " outline: style.outlineStyle + ' ' + style.outlineWidth, shadow: style.boxShadow}; }"
    )


def test_skip_link_then_a_form_by_keyboard_alone(page, relay):
    queue = make_queue(relay)
    page.goto(f"/queues/{queue}/")
    page.keyboard.press("Tab")
    first = focused(page)
    assert (first["tag"], first["text"]) == ("A", "Skip to content")
    assert page.get_by_role("link", name="Skip to content").is_visible()  # shown on focus
    assert first["outline"] != "none 0px" or first["shadow"] != "none"
    page.keyboard.press("Enter")
    assert focused(page)["id"] == "main"
    # on to the publish form, by Tab alone, and send it with Enter on its button
    for _ in range(80):
        page.keyboard.press("Tab")
        if focused(page)["name"] == "address":
            break
    here = focused(page)
    assert here["name"] == "address"
    assert here["outline"] != "none 0px" or here["shadow"] != "none"  # focus is visible
    page.keyboard.type("keyboard.only")
    page.keyboard.press("Tab")
    assert focused(page)["name"] == "headers"
    page.keyboard.type("via: keys")
    page.keyboard.press("Tab")
    assert focused(page)["name"] == "body"
    page.keyboard.type("typed")
    while focused(page)["tag"] != "BUTTON":
        page.keyboard.press("Tab")
    assert focused(page)["text"] == "Publish"
    page.keyboard.press("Enter")
    page.get_by_text("Published message").wait_for()
    [sent] = relay.call("peek", queue=queue)
    assert (sent["address"], sent["headers"], sent["body"]) == (
        "keyboard.only", {"via": "keys"}, "typed",
    )  # fmt: skip
