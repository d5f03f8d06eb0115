"""Analytics through the service as operators use it: traffic published over HTTP and
routed by a real Celery worker, archived by `xump archive` (history and the delivery
journal, written once however often it runs), a backtest started from the console form
and run by the worker on real Spark (local[2]) with exact counts, a replay of its
selection into another queue, bad input refused with nothing started, pages behind login.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pyarrow.dataset as ds
import pytest

from tests.web import conftest
from tests.web.conftest import CSRF, ROOT, console_login, eventually, unique

ORDERS, INVOICES = 40, 20  # messages published: order.eu.N and invoice.us.N


@pytest.fixture(scope="module")
def analytics_service(redis_server, tmp_path_factory):
    """The service with a Celery worker, its archive and Spark master set for the tests."""
    directory = tmp_path_factory.mktemp("analytics")
    build = conftest._environment

    def environment(*args, **kwargs):
        env = build(*args, **kwargs)
        env.update(XUMP_ARCHIVE_DIR=str(directory / "archive"), XUMP_SPARK_MASTER="local[2]",
                   XUMP_SPARK_DRIVER_MEMORY="1g")  # fmt: skip
        return env

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conftest, "_environment", environment)
        running = conftest.start_service(redis_server.url, directory, "worker")
    running.start_worker()
    running.archive = directory / "archive"
    yield running
    running.close()


def xump(service, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "xump", *args], cwd=ROOT, env=service.env,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.fixture(scope="module")
def traffic(analytics_service):
    """Two queues: `source` copies everything to `sink`, which deletes it; both keep
    history. 60 messages published to `source`, all routed."""
    source, sink = unique("src"), unique("sink")
    with analytics_service.client() as client:
        for name in (source, sink):
            made = client.post("/api/queues", json={"name": name, "history": 1000})
            assert made.status_code == 201, made.text
        for queue, settings in ((source, {"action": "copy", "target": sink}),
                                (sink, {"action": "delete"})):  # fmt: skip
            made = client.post(f"/api/queues/{queue}/selectors",
                               json={"when": "always", "enabled": True, **settings})  # fmt: skip
            assert made.status_code == 201, made.text
        batch = [{"address": f"order.eu.{n}", "headers": {"priority": n % 10}, "body": f"o{n}"}
                 for n in range(ORDERS)]  # fmt: skip
        batch += [{"address": f"invoice.us.{n}", "headers": {"priority": n % 10},
                   "body": f"i{n}"} for n in range(INVOICES)]  # fmt: skip
        published = client.post(f"/api/queues/{source}/publish-batch", json={"messages": batch})
        assert published.status_code == 202, published.text

        def routed() -> bool:
            stats = client.get(f"/api/queues/{sink}/stats").json()
            return stats.get("history_size") == ORDERS + INVOICES

        eventually(routed, "the orders and invoices routed", 30)
    return {"source": source, "sink": sink}


def events(archive: Path) -> list[dict]:
    root = archive / "events"
    if not root.exists():
        return []
    found = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    return found.to_pylist()


def history(archive: Path, queue: str) -> list[dict]:
    found = ds.dataset(archive / "history", format="parquet", partitioning="hive").to_table()
    return [row for row in found.to_pylist() if row["queue"] == queue]


def test_archive_writes_the_journal_and_history_once(analytics_service, traffic):
    source, sink = traffic["source"], traffic["sink"]
    first = xump(analytics_service, "archive", "--progress")
    assert first.returncode == 0, first.stderr
    assert "archived" in first.stdout and "[" in first.stderr  # the progress bar
    archive = analytics_service.archive
    kinds = Counter((e["kind"], e["queue"]) for e in events(archive))
    assert kinds[("publish", source)] == ORDERS + INVOICES
    assert kinds[("route", source)] == ORDERS + INVOICES
    assert kinds[("delete", sink)] == ORDERS + INVOICES
    published = [e for e in events(archive) if e["kind"] == "publish" and e["queue"] == source]
    assert sorted(e["address"] for e in published)[:1] == ["invoice.us.0"]
    assert len(history(archive, source)) == ORDERS + INVOICES
    assert len(history(archive, sink)) == ORDERS + INVOICES
    assert {row["body"] for row in history(archive, source)} >= {b"o0", b"i19"}
    before = len(events(archive))

    again = xump(analytics_service, "archive", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert re.search(r"archived \d+ events and 0 history messages", again.stdout), again.stdout
    rows = events(archive)
    positions = Counter((e["epoch"], e["position"]) for e in rows)
    assert max(positions.values()) == 1  # no event twice
    assert len(history(archive, source)) == ORDERS + INVOICES
    # the second run wrote only what happened in between (its own browse calls are no
    # routing events), so nothing of the traffic came twice
    assert (
        Counter(e["kind"] for e in rows)["publish"]
        == Counter(e["kind"] for e in events(archive))["publish"]
    )
    assert len(rows) >= before


def test_a_queue_with_its_journal_off_keeps_its_events_out_of_the_archive(analytics_service):
    quiet = unique("quiet")
    with analytics_service.client() as client:
        made = client.post("/api/queues", json={"name": quiet, "history": 100, "journal": False})
        assert made.status_code == 201 and made.json()["journal"] is False, made.text
        client.post(f"/api/queues/{quiet}/selectors",
                    json={"when": "always", "action": "delete", "enabled": True})  # fmt: skip
        client.post(f"/api/queues/{quiet}/publish-batch", json={"messages": [{"body": "a"}] * 5})
        eventually(lambda: client.get(f"/api/queues/{quiet}/stats").json()["history_size"] == 5,
                   "5 messages in the history", 30)  # fmt: skip
        assert xump(analytics_service, "archive", "--no-progress").returncode == 0
        assert [e for e in events(analytics_service.archive) if e["queue"] == quiet] == []
        assert len(history(analytics_service.archive, quiet)) == 5  # history is archived

        changed = client.patch(f"/api/queues/{quiet}", json={"journal": True})
        assert changed.status_code == 200 and changed.json()["journal"] is True, changed.text
        client.post(f"/api/queues/{quiet}/publish", json={"body": "b"})
        eventually(lambda: client.get(f"/api/queues/{quiet}/stats").json()["history_size"] == 6,
                   "6 messages in the history", 30)  # fmt: skip
        assert xump(analytics_service, "archive", "--no-progress").returncode == 0
    kinds = Counter(e["kind"] for e in events(analytics_service.archive) if e["queue"] == quiet)
    assert kinds == {"publish": 1, "delete": 1}


def test_a_queue_deleted_and_made_again_has_both_histories_archived(analytics_service):
    name = unique("again")

    def make_and_fill(prefix: str, count: int) -> None:
        assert client.post("/api/queues", json={"name": name, "history": 100}).status_code == 201
        client.post(f"/api/queues/{name}/selectors",
                    json={"when": "always", "action": "delete", "enabled": True})  # fmt: skip
        batch = [{"body": f"{prefix}{n}"} for n in range(count)]
        client.post(f"/api/queues/{name}/publish-batch", json={"messages": batch})
        eventually(lambda: client.get(f"/api/queues/{name}/stats").json()["history_size"] == count,
                   f"{count} messages in the history", 30)  # fmt: skip
        assert xump(analytics_service, "archive", "--no-progress").returncode == 0

    with analytics_service.client() as client:
        make_and_fill("old", 3)
        assert client.delete(f"/api/queues/{name}").status_code == 200
        make_and_fill("new", 2)  # seqs 1 and 2 again
    bodies = sorted(row["body"] for row in history(analytics_service.archive, name))
    assert bodies == [b"new0", b"new1", b"old0", b"old1", b"old2"]


def test_only_the_newest_periodic_archive_runs_are_kept(analytics_service):
    made = analytics_service.manage(
        "shell", "-c",
        "from xumpweb.analytics.models import AnalyticsRun as R\n"
        "R.objects.filter(kind='archive').delete()\n"
        "for n in range(60): R.objects.create(kind='archive', created_by='beat', status='done')\n"
        "R.objects.create(kind='archive', created_by='beat', status='failed', error='x')\n"
        "R.objects.create(kind='archive', created_by='admin', status='done')\n"
        "print(R.prune_periodic(), R.objects.filter(kind='archive').count())",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.split()[-2:] == ["10", "52"]


# -- the console ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser(analytics_service):
    """A logged-in console session (httpx with the session cookie and CSRF)."""
    with console_login(analytics_service.url) as client:
        yield client


def post_form(browser: httpx.Client, page: str, action: str, fields: dict) -> httpx.Response:
    token = CSRF.search(browser.get(page).text)[1]
    return browser.post(action, data={"csrfmiddlewaretoken": token, **fields})


def finished(browser: httpx.Client, number: int, timeout: float = 150.0) -> dict:
    def ended() -> dict | None:
        run = browser.get(f"/analytics/{number}/run.json").json()
        return run if run["status"] in ("done", "failed") else None

    return eventually(ended, f"run {number} to end", timeout, every=0.5)


def run_numbers(browser: httpx.Client) -> list[int]:
    return [int(n) for n in re.findall(r'data-run="(\d+)"', browser.get("/analytics/").text)]


def expected_mids(archive: Path, queue: str) -> set[str]:
    """The mids of `queue`'s archived orders with priority >= 5, read from the Parquet."""
    return {
        row["mid"] for row in history(archive, queue)
        if row["address"].startswith("order.") and dict(row["headers_int"])["priority"] >= 5
    }  # fmt: skip


@pytest.fixture(scope="module")
def backtest(analytics_service, traffic, browser):
    """A backtest of `order.# AND priority >= 5` over the source queue, from the form."""
    archived = xump(analytics_service, "archive", "--no-progress")
    assert archived.returncode == 0, archived.stderr
    answer = post_form(browser, "/analytics/new/?kind=backtest", "/analytics/new/", {
        "kind": "backtest", "queues": [traffic["source"]], "match_operator": "topic",
        "pattern": "order.#", "filter": "priority >= 5",
    })  # fmt: skip
    assert answer.status_code == 302, answer.text
    number = int(re.search(r"/analytics/(\d+)/", answer.headers["location"])[1])
    return finished(browser, number)


def test_a_backtest_from_the_form_counts_exactly(analytics_service, traffic, backtest, browser):
    assert backtest["status"] == "done", backtest["error"]
    result = backtest["result"]
    taken = ORDERS // 2  # priorities 5..9 of each ten
    assert (result["examined"], result["taken"]) == (ORDERS + INVOICES, taken)
    assert result["by_queue"] == [
        {"queue": traffic["source"], "examined": ORDERS + INVOICES, "taken": taken}
    ]
    assert sum(row["taken"] for row in result["by_hour"]) == taken
    assert set(result["samples"]) == expected_mids(analytics_service.archive, traffic["source"])
    page = browser.get(f"/analytics/{backtest['id']}/")
    assert page.status_code == 200
    assert f'data-total="taken">{taken}<' in page.text
    assert "taken-per-hour-data" in page.text and 'name="queue"' in page.text  # chart, replay
    assert result["samples"][0] in page.text


def test_replay_publishes_the_selected_messages_into_a_queue(
    analytics_service, traffic, backtest, browser
):
    target = unique("backfill")
    with analytics_service.client() as client:
        assert client.post("/api/queues", json={"name": target}).status_code == 201
    number = backtest["id"]
    refused = post_form(browser, f"/analytics/{number}/", f"/analytics/{number}/replay/",
                        {"queue": target})  # fmt: skip
    assert refused.status_code == 200 and "This field is required" in refused.text  # no confirm
    answer = post_form(browser, f"/analytics/{number}/", f"/analytics/{number}/replay/",
                       {"queue": target, "confirm": "on"})  # fmt: skip
    assert answer.status_code == 302, answer.text
    replay = int(re.search(r"/analytics/(\d+)/", answer.headers["location"])[1])
    run = finished(browser, replay)
    assert run["status"] == "done", run["error"]
    assert run["result"]["published"] == ORDERS // 2
    with analytics_service.client() as client:

        def replayed() -> list[dict] | None:
            found = client.get(f"/api/queues/{target}/waiting").json()["messages"]
            return found if len(found) == ORDERS // 2 else None

        waiting = eventually(replayed, "the replayed messages waiting", 30)
    expected = {f"o{n}" for n in range(ORDERS) if n % 10 >= 5}
    assert {m["body"] for m in waiting} == expected
    assert all(m["address"].startswith("order.eu.") for m in waiting)


def test_a_traffic_report_counts_what_the_journal_recorded(analytics_service, traffic, browser):
    xump(analytics_service, "archive", "--no-progress")
    source, sink = traffic["source"], traffic["sink"]
    answer = post_form(browser, "/analytics/new/", "/analytics/new/",
                       {"kind": "report", "queues": [source, sink]})  # fmt: skip
    assert answer.status_code == 302, answer.text
    run = finished(browser, int(re.search(r"/analytics/(\d+)/", answer.headers["location"])[1]))
    assert run["status"] == "done", run["error"]
    queues = {q["queue"]: q for q in run["result"]["queues"]}
    assert set(queues) == {source}  # the sink only deleted: no counted event happened there
    assert queues[source]["published"] == ORDERS + INVOICES
    assert sum(p["published"] for p in queues[source]["series"]) == ORDERS + INVOICES
    assert run["result"]["totals"]["published"] == ORDERS + INVOICES
    page = browser.get(f"/analytics/{run['id']}/")
    assert "published-per-minute-data" in page.text
    assert f'data-total="published">{ORDERS + INVOICES}<' in page.text


def test_a_bad_filter_shows_its_column_and_starts_nothing(analytics_service, browser):
    before = run_numbers(browser)
    answer = post_form(browser, "/analytics/new/", "/analytics/new/", {
        "kind": "backtest", "match_operator": "", "pattern": "", "filter": "priority >> 5",
    })  # fmt: skip
    assert answer.status_code == 200
    assert re.search(r"column \d+", answer.text), answer.text
    assert 'class="expr-error"' in answer.text
    bad_pattern = post_form(browser, "/analytics/new/", "/analytics/new/", {
        "kind": "backtest", "match_operator": "regex", "pattern": "order.(", "filter": "",
    })  # fmt: skip
    assert bad_pattern.status_code == 200 and "invalid" in bad_pattern.text
    nothing = post_form(browser, "/analytics/new/", "/analytics/new/", {"kind": "backtest"})
    assert "a backtest needs a match" in nothing.text
    assert run_numbers(browser) == before


def test_pages_need_a_login(analytics_service, backtest):
    number = backtest["id"]
    with httpx.Client(base_url=analytics_service.url, timeout=30) as anonymous:
        for path in ("/analytics/", "/analytics/new/", f"/analytics/{number}/",
                     f"/analytics/{number}/run.json", f"/analytics/{number}/status/",
                     f"/analytics/{number}/replay/"):  # fmt: skip
            answer = anonymous.get(path)
            assert answer.status_code == 302 and answer.headers["location"].startswith("/login/")
        refused = anonymous.post("/analytics/archive/")
        assert refused.status_code in (302, 403)
