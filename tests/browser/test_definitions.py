"""The definitions page: edit the current wiring, see the dry-run diff, then apply it."""

from __future__ import annotations

import json

from tests.browser.conftest import axe_scan, make_queue, unique


def test_a_dry_run_shows_the_diff_and_changes_nothing_until_applied(page, relay):
    tuned = make_queue(relay, unique("tuned"), history=1)
    added = unique("added")
    page.goto("/definitions/")
    page.get_by_role("link", name="Edit the current definitions").click()
    editor = page.get_by_label("Definitions document (JSON)")
    document = json.loads(editor.input_value())
    for queue in document["queues"]:
        if queue["name"] == tuned:
            queue["history"] = 7
    document["queues"].append({"name": added, "limit": 5})
    editor.fill(json.dumps(document))
    page.get_by_role("button", name="Preview changes (dry run)").click()

    diff = page.locator("#diff")
    diff.get_by_text("Dry run: what importing would change").wait_for()
    assert page.locator("#diff-summary").inner_text().startswith("1 to create, 1 to update")
    update = diff.locator("tr.diff-update")
    assert update.count() == 1  # only the field that changes
    assert [c.strip() for c in update.locator("td").all_inner_texts()] == [
        "update", "queue", tuned, "history", "1", "7"
    ]  # fmt: skip
    assert diff.locator("tr.diff-create").first.inner_text().split("\t")[:3] == [
        "create", "queue", added
    ]  # fmt: skip
    assert relay.call("queue_get", name=tuned)["history"] == 1  # a dry run changes nothing
    assert added not in {q["name"] for q in relay.call("queues")}
    assert axe_scan(page) == []

    page.on("dialog", lambda dialog: dialog.accept())  # "Apply these changes?"
    page.get_by_role("button", name="Apply these changes").click()
    page.get_by_role("heading", name="Imported").wait_for()
    assert page.locator("#diff-summary").inner_text().startswith("1 created, 1 updated")
    assert relay.call("queue_get", name=tuned)["history"] == 7
    assert relay.call("queue_get", name=added)["limit"] == 5
    exported = page.request.get("/api/definitions")  # the download link, by session
    assert exported.ok
    [shown] = [q for q in exported.json()["queues"] if q["name"] == added]
    assert (shown["limit"], shown["history"]) == (5, 0)
    assert not page.errors


def test_an_invalid_document_lists_its_problems(page, relay):
    page.goto("/definitions/")
    page.get_by_label("Definitions document (JSON)").fill(
        json.dumps({"xump_definitions": 1, "queues": [{"name": "a b"}, {"name": "n", "limit": -1}]})
    )
    page.get_by_role("button", name="Preview changes (dry run)").click()
    problems = page.locator("#problems")
    problems.get_by_text("2 problems: nothing changed").wait_for()
    assert "queues[0] (a b)" in problems.inner_text()
    assert "queues[1] (n)" in problems.inner_text()
    assert "n" not in {q["name"] for q in relay.call("queues")}
