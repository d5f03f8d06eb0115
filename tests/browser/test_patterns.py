"""Pattern wizards: the plan shown before saving, building a parrot, its live state."""

from __future__ import annotations

from engine.message import Message
from tests.browser.conftest import publish, unique


def test_parrot_wizard_shows_the_plan_then_builds_it(page, relay):
    router, subscriber = unique("news"), unique("reader")
    private = f"{router}:{subscriber}"
    page.goto("/patterns/")
    page.get_by_role("link", name="New parrot").click()
    page.get_by_label("subscriber").fill(subscriber)
    page.get_by_label("router queue").fill(router)
    page.get_by_label("topic pattern").fill("sport.#")
    # the plan follows the form as it is typed, before anything is saved
    plan = page.locator("#plan")
    plan.get_by_text(private).first.wait_for()
    plan.get_by_text("WHEN topic 'sport.#' DO COPY").wait_for()
    assert "WHEN always DO DELIVER to " + subscriber in plan.inner_text()
    assert plan.locator(".pill.ok").count() == 4  # two new queues, two new selectors
    assert router not in {q["name"] for q in relay.call("queues")}  # nothing built yet

    page.get_by_role("button", name="Build parrot").click()
    page.wait_for_url("**/patterns/")
    page.get_by_text("Built parrot").wait_for()
    [to_private] = relay.call("selectors", queue=router)
    assert (to_private["action"], to_private["target"]) == ("copy", private)
    [to_subscriber] = relay.call("selectors", queue=private)
    assert (to_subscriber["action"], to_subscriber["target"]) == ("deliver", subscriber)

    # its live state: a matching message is delivered and waits for the subscriber's confirm
    publish(relay, router, Message(address="sport.tennis", body=b"match point"),
            Message(address="weather", body=b"rain"))  # fmt: skip
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function(  # the list follows the router's numbers without a reload
        "q => { const row = [...document.querySelectorAll('#pattern-rows tr')]"
        ".find(r => r.textContent.includes(q)); return row && [...row.querySelectorAll('td.num')]"
        ".map(td => td.textContent.trim()).join() === '0,1,1,0'; }",
        arg=private,
    )  # waiting, outstanding, delivered, confirmed
    assert page.evaluate("window.__sameDocument") is True
    assert not page.errors
