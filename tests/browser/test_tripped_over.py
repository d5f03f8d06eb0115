"""What a new user tripped over (issue 15), one test each, in the browser: selectors read in
words, a failed "Create a queue" shows its error, the history browser has no dead ends and
filters the whole history, the preview agrees with the engine on numeric headers, the
admin's queue list has live figures, the traffic report's tables and charts read well, the
archive result and audit changes are not Python reprs, a wolfpack worker rebuilt with
another credit gets it, a queue named `../etc` opens its own page, long names wrap."""

from __future__ import annotations

import json
import re
import time

from engine.message import Message
from tests.browser.conftest import make_queue, publish, unique
from tests.browser.test_queue_page import history_queue, seqs_shown

WIDTH = 1400  # the page fixture's viewport


def history_shows(page, first_seq: int) -> None:
    page.wait_for_function(
        "s => (document.querySelector('#history tbody td.num a') || {}).textContent === s",
        arg=str(first_seq),
    )


def test_selectors_read_as_when_and_do_in_words(page, relay):
    jobs = make_queue(relay, unique("jobs"))
    worker = make_queue(relay, f"{jobs}:w1")
    relay.call("selector_create", queue=jobs, when="always", action="move", target=worker,
               enabled=True)  # fmt: skip
    relay.call("selector_create", queue=jobs, when="match", action="copy", target=worker,
               match={"operator": "topic", "pattern": "eu.#", "field": "address"})  # fmt: skip
    page.goto(f"/queues/{jobs}/")
    cells = page.locator("section[aria-labelledby=selectors-heading] tbody td.mono")
    assert cells.all_inner_texts() == [
        f"always → move to {worker}",
        f"address matches topic eu.# → copy to {worker}",
    ]
    assert "<Selector" not in page.content()
    # the API's JSON (the same operation answers it) says so too, old fields kept
    first, _ = relay.call("selectors", queue=jobs)
    assert first["description"] == first["describe"] == f"always → move to {worker}"
    assert (first["when"], first["action"], first["target"]) == ("always", "move", worker)


def test_a_failed_queue_creation_shows_its_error(page):
    page.goto("/")
    page.get_by_text("Create a queue").click()
    form = page.locator("details").filter(has_text="Create a queue")
    form.get_by_label("Name").fill("has a space")
    form.get_by_role("button", name="Create queue").click()
    page.wait_for_load_state()
    error = page.locator("details").filter(has_text="Create a queue").locator(".error").first
    assert "whitespace" in error.text_content()
    error.wait_for(state="visible", timeout=3000)  # the section opened by itself: it shows


def test_the_history_browser_has_no_dead_end_pages(page, relay):
    queue = history_queue(relay, 45)  # pages of 20: 45..26, 25..6, 5..1
    page.goto(f"/queues/{queue}/")
    assert seqs_shown(page) == list(range(45, 25, -1))
    pager = page.locator("#history .pager")
    assert pager.get_by_role("link", name="Newer →").count() == 0  # nothing is newer
    pager.get_by_role("link", name="← Older").click()
    history_shows(page, 25)
    pager.get_by_role("link", name="← Older").click()
    history_shows(page, 5)
    assert seqs_shown(page) == [5, 4, 3, 2, 1]
    assert pager.get_by_role("link", name="← Older").count() == 0  # nothing is older
    pager.get_by_role("link", name="Oldest").click()
    history_shows(page, 20)
    assert pager.get_by_role("link", name="← Older").count() == 0
    pager.get_by_role("link", name="Newer →").click()
    history_shows(page, 40)
    pager.get_by_role("link", name="Newer →").click()
    history_shows(page, 45)
    assert seqs_shown(page) == [45, 44, 43, 42, 41]
    assert pager.get_by_role("link", name="Newer →").count() == 0
    assert not page.errors


def test_the_history_filter_searches_the_whole_history_in_pages(page, relay):
    queue = history_queue(relay, 60)
    # nothing matches: an answer, not a server error
    answer = page.goto(f"/queues/{queue}/?filter=n+%3E+1000")
    assert answer.status == 200
    assert seqs_shown(page) == []
    assert "0 matching the filter" in page.locator("#history-summary").inner_text()
    # matches only on the oldest page of 20: found from the latest page
    page.goto(f"/queues/{queue}/")
    page.get_by_label("Filter", exact=True).fill("n <= 3")
    page.get_by_role("button", name="Show").click()
    history_shows(page, 3)
    assert seqs_shown(page) == [3, 2, 1]
    # 30 matches (priority 5..9): a page of 20, then the other 10, then no further
    page.get_by_label("Filter", exact=True).fill("priority >= 5")
    page.get_by_role("button", name="Show").click()
    history_shows(page, 59)
    wanted = [n for n in range(60, 0, -1) if n % 10 >= 5]
    assert seqs_shown(page) == wanted[:20]
    page.locator("#history .pager").get_by_role("link", name="← Older").click()
    history_shows(page, wanted[20])
    assert seqs_shown(page) == wanted[20:]
    assert page.locator("#history .pager").get_by_role("link", name="← Older").count() == 0
    assert not page.errors


def test_the_preview_takes_numeric_headers_as_the_engine_does(page, relay):
    queue = make_queue(relay, history=100)
    sink = make_queue(relay)
    relay.call("selector_create", queue=queue, when="always", action="copy", target=sink,
               enabled=True)  # fmt: skip
    publish(relay, queue, *[Message(address="a", headers={"priority": n % 10}, body=b"x")
                            for n in range(1, 31)])  # fmt: skip
    page.goto(f"/queues/{queue}/selectors/new/")
    page.locator("input[name=when][value=match]").check()
    page.get_by_label("match operator").select_option("eq")
    page.get_by_label("pattern", exact=True).fill("9")
    page.get_by_label("field").fill("priority")
    page.get_by_label("DO").select_option("delete")
    page.get_by_role("button", name="Preview against recent messages").click()
    summary = page.locator("#preview-summary")
    summary.wait_for()
    # priority 9 (a number) against the pattern "9": the engine takes n = 9, 19, 29
    assert summary.inner_text().startswith("3 of the last 30 messages would be taken")
    # ... and so does a selector that replays the history with the same WHEN
    taker = make_queue(relay)
    relay.call("selector_create", queue=queue, when="match", action="copy", target=taker,
               match={"operator": "eq", "pattern": "9", "field": "priority"}, start="head",
               enabled=True)  # fmt: skip
    relay.call("stats", queue=queue)
    assert relay.call("queue_get", name=taker)["depth"] == 3


def test_the_admin_queue_list_shows_live_figures_and_one_history_column(page, relay):
    queue = make_queue(relay, history=7)
    publish(relay, queue, *[Message(address="a", body=b"x") for _ in range(3)])  # no selector
    deadline = time.monotonic() + 30
    while True:  # the router's stats snapshot is taken every few seconds
        page.goto(f"/admin/wiring/queue/?q={queue}")
        th = page.locator("#result_list thead th")
        headers = [h.strip().lower() for h in th.all_inner_texts()]
        row = page.locator("#result_list tbody tr").filter(has_text=queue)
        cells = dict(zip(headers, [c.strip() for c in row.locator("th, td").all_inner_texts()],
                         strict=False))  # fmt: skip
        if cells.get("unprocessed") == "3" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert headers.count("history") == 0 and "in history" in headers
    assert "history kept" in headers
    assert (cells["unprocessed"], cells["in history"], cells["outstanding"]) == ("3", "0", "0")
    assert cells["history kept"] == "7"


def report_run(console) -> int:
    """A finished traffic report in the console's database, shaped as the Spark job's
    summary (engine/pipeline/traffic.py) is, with its long floats and busy minutes."""
    queues = [unique("traffic-queue-with-a-long-name"), unique("audit")]
    series = [
        {"minute": f"2026-11-23T13:{m:02d}:00Z", "published": 12000 + 97 * m, "delivered": 0,
         "confirmed": 0, "rejected": 0, "dead_lettered": 0}
        for m in range(0, 50, 5)
    ]  # fmt: skip
    result = {
        "job": "traffic",
        "queues": [
            {"queue": name, "published": 130000, "delivered": 129000, "confirmed": 128000,
             "rejected": 12, "dead_lettered": 40 + n,
             "dead_letter_reasons": {"rejected": 12, "unroutable-because-nothing-matched": 28 + n},
             "latency": {"confirmed": 128000, "p50": 0.012345678901234567,
                         "p90": 0.09876543210987654, "p99": 1.2345678901234567,
                         "mean": 0.033333333333333333},
             "series": series}
            for n, name in enumerate(queues)
        ],
        "totals": {"published": 260000, "delivered": 258000, "confirmed": 256000,
                   "rejected": 24, "dead_lettered": 81},
        "top_addresses": [{"address": "orders.eu", "published": 200000}],
        "series_truncated": False,
    }  # fmt: skip
    code = (
        "import json\nfrom django.utils import timezone\n"
        "from xumpweb.analytics.models import AnalyticsRun\n"
        f"run = AnalyticsRun.objects.create(kind='report', status='done', created_by='tests',"
        f" result=json.loads({json.dumps(json.dumps(result))}), finished=timezone.now())\n"
        "print(run.pk)"
    )
    made = console.manage("shell", "-c", code)
    assert made.returncode == 0, made.stderr
    return int(made.stdout.split()[-1])


def test_the_traffic_report_tables_sit_side_by_side_with_short_numbers(page, console):
    page.goto(f"/analytics/{report_run(console)}/")
    latency = page.locator("section[aria-labelledby=latency-heading]")
    numbers = latency.locator("tbody td").all_inner_texts()
    assert not [n for n in numbers if re.search(r"\.\d{4,}", n)], numbers
    assert "12.3" in numbers and "1234.6" in numbers  # milliseconds, to a tenth
    # no cell of either table lies under the other one: each is hit where it is drawn
    hidden = page.evaluate("""() => {
        const hidden = [];
        for (const id of ['latency-heading', 'reasons-heading']) {
            const section = document.querySelector(`section[aria-labelledby=${id}]`);
            const box = section.getBoundingClientRect();
            for (const cell of section.querySelectorAll('th, td')) {
                cell.scrollIntoView({block: 'center'});
                const r = cell.getBoundingClientRect();
                const x = r.left + r.width / 2, y = r.top + r.height / 2;
                if (x > box.right) continue;  // scrolled away inside its own column
                const hit = document.elementFromPoint(x, y);
                if (!hit || !cell.contains(hit)) hidden.push(cell.textContent);
            }
        }
        return hidden;
    }""")
    assert hidden == []
    assert not page.errors


def test_chart_axes_fit_their_labels_and_read_24_hour_utc(page, console):
    page.goto(f"/analytics/{report_run(console)}/")
    page.wait_for_function(
        "document.querySelectorAll('.chart').length === 3"
        " && [...document.querySelectorAll('.chart')].every(c => c._plot)"
    )
    axes = page.evaluate("""() => [...document.querySelectorAll('.chart')].map(el => {
        const u = el._plot;
        return u.axes.map(a => {
            u.ctx.font = a.font[0];
            const widths = (a._values || []).map(v => u.ctx.measureText(String(v)).width
                                                     / (window.devicePixelRatio || 1));
            return {values: a._values, size: a._size, room: a.ticks.size + a.gap,
                    widest: Math.max(0, ...widths), plotWidth: u.bbox.width
                    / (window.devicePixelRatio || 1)};
        });
    })""")
    per_minute, latency, reasons = axes
    times = per_minute[0]["values"]
    assert times and all(re.fullmatch(r"1[34]:\d\d", t) for t in times), times  # no "1:05pm"
    for chart in axes:
        y = chart[1]
        assert y["widest"] + y["room"] <= y["size"], y  # the y labels are not cut off
    for chart in (latency, reasons):
        x = chart[0]
        room = x["plotWidth"] / len(x["values"])
        assert x["widest"] <= room, x  # category labels fit their bar groups
    assert not page.errors


def test_the_archive_result_reads_as_labelled_values(page, console, relay, tmp_path):
    queue = history_queue(relay, 3)
    archived = console.manage("xump", "archive", "--out", str(tmp_path / "archive"),
                              "--no-progress")  # fmt: skip
    assert archived.returncode == 0, archived.stderr
    number = re.search(r"\(run (\d+)", archived.stdout)[1]
    page.goto(f"/analytics/{number}/")
    result = page.locator("section[aria-labelledby=result-heading]")
    text = result.inner_text()
    assert "{" not in text and "'" not in text
    assert "History messages written, per queue" in text
    row = result.locator("tr").filter(has_text=queue)
    assert row.locator("td").inner_text() == "3"


def test_audit_changes_are_a_diff_not_python_reprs(page, relay):
    queue = make_queue(relay, history=5)
    page.goto(f"/queues/{queue}/")
    settings = page.locator("section[aria-labelledby=settings-heading]")
    settings.get_by_label("History").fill("10")
    settings.get_by_role("button", name="Save settings").click()
    page.get_by_text("Settings saved.").wait_for()
    page.goto(f"/audit/?q={queue}")
    entry = page.locator("table.audit > tbody > tr").filter(has_text="queue.update")
    entry.get_by_text("before / after").click()
    text = entry.inner_text()
    assert "{'" not in text and "None" not in text and "False" not in text
    changed = entry.locator("table.diff tr.changed")
    assert changed.count() == 1
    assert changed.locator("th, td").all_inner_texts() == ["history", "5", "10"]


def test_rebuilding_a_wolfpack_worker_with_another_credit_updates_it(page, relay):
    service, worker = unique("jobs"), unique("w")

    def build(credit: int, said: str) -> None:
        page.goto("/patterns/new/wolfpack/")
        page.get_by_label("worker").fill(worker)
        page.get_by_label("service queue").fill(service)
        page.get_by_label("credit").fill(str(credit))
        page.locator("#plan").get_by_text(said).first.wait_for()
        page.get_by_role("button", name="Build wolfpack").click()
        page.wait_for_url("**/patterns/")

    build(1, "new, enabled")
    build(3, "exists, updated: credit 1 → 3")
    page.get_by_text("credit 3").first.wait_for()
    [move] = relay.call("selectors", queue=service)
    assert (move["action"], move["credit"]) == ("move", 3)


def test_a_queue_named_dot_dot_slash_etc_opens_its_own_page(page, relay):
    odd = make_queue(relay, f"../{unique('etc')}")
    plain = make_queue(relay, unique("orders") + "/eu:w1")
    for name in (odd, plain):
        page.goto(f"/?q={name.split('/')[-1]}")
        link = page.locator("#queue-table tbody th a").filter(has_text=name)
        link.click()
        page.wait_for_load_state()
        assert page.locator("h1").inner_text() == f"Queue {name}"
        assert "/queues/" in page.url
    assert page.url.endswith(f"/queues/{plain}/")  # a name with `/` keeps its plain link
    # the pages below the odd queue work as well
    page.goto(f"/?q={odd.split('/')[-1]}")
    page.locator("#queue-table tbody th a").filter(has_text=odd).click()
    page.get_by_role("link", name="New selector").click()
    page.wait_for_load_state()
    assert page.locator("h1").inner_text().endswith(odd)


def test_long_names_wrap_instead_of_widening_pages(page, relay):
    name = make_queue(relay, "long-" + unique() + "x" * 180)
    target = make_queue(relay, name[:-1] + "-")
    relay.call("selector_create", queue=name, when="always", action="copy", target=target)
    publish(relay, name, Message(address="a" * 300, headers={"h" * 150: "v" * 300}, body=b"x"))
    for url in ("/", f"/queues/{name}/", f"/queues/{name}/selectors/new/",
                f"/queues/{name}/selectors/1/", "/audit/", "/topology/"):  # fmt: skip
        page.goto(url)
        page.wait_for_load_state()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= WIDTH, f"{url} is {width} px wide"
    page.goto(f"/?q={name}")  # the dashboard is paged: search for it
    link = page.locator(f'#queue-table tbody tr[data-queue="{name}"] th a')
    assert link.get_attribute("title") == name  # cut short, the whole name on hover
