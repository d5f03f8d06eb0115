"""API tokens page: create with a scope, the secret shown once, revoke; all audited."""

from __future__ import annotations

import httpx

from tests.browser.conftest import make_queue, unique


def test_create_use_and_revoke_a_scoped_token(page, relay, console):
    prefix = unique("scoped")
    mine, other = make_queue(relay, f"{prefix}-orders"), make_queue(relay)
    name = unique("ci-bot")
    page.goto("/tokens/")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Rights").fill(f"{prefix}-*: publish")
    page.get_by_role("button", name="Create token").click()
    secret = page.get_by_role("textbox", name="Token", exact=True).input_value()
    assert secret.startswith("xump_")

    def publish(queue: str) -> int:
        answer = httpx.post(f"{console.url}/api/queues/{queue}/publish", json={"body": "hi"},
                            headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
        return answer.status_code

    assert publish(mine) == 202  # in scope
    assert publish(other) == 403  # out of scope
    page.reload()  # shown once: never again, and a reload makes no second token
    assert page.get_by_role("textbox", name="Token", exact=True).count() == 0
    assert page.get_by_role("button", name=f"Revoke {name}").count() == 1
    assert secret not in page.content()
    page.on("dialog", lambda dialog: dialog.accept())  # "Revoke this token?"
    page.get_by_role("button", name=f"Revoke {name}").click()
    page.get_by_text(f"Revoked {name}").wait_for()
    assert publish(mine) == 401
    page.goto(f"/audit/?q={name}")
    log = page.locator("table.audit").inner_text()
    assert "token.create" in log and "token.revoke" in log
