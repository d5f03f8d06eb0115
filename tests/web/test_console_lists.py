"""Every list the console shows is paged (issue 21): the patterns and the tokens pages
show at most PAGE rows each, with the pager of the audit log (page N of M), and every row
is on exactly one page."""

from __future__ import annotations

import re
import time

from tests.web.conftest import unique

PAGE = 100


def pages(console, path: str, mark: str) -> tuple[list[list[str]], int]:
    """The `mark`-ed names on each page of `path`, and how many pages it said it had."""
    first = console.get(path)
    assert first.status_code == 200, first.text[:300]
    found = re.search(r"page 1 of (\d+)", first.text)
    assert found, "no pager on " + path
    count = int(found[1])
    seen = []
    for number in range(1, count + 1):
        page = console.get(path, params={"page": number}).text
        rows = page.count("<tr>") - 1  # the head's row
        assert rows <= PAGE
        seen.append(re.findall(rf"{mark}-\d+", page))
    return seen, count


def test_the_patterns_page_is_paged(service, console) -> None:
    mark = unique("pp")
    service.shell(
        "from xumpweb.wiring.models import Pattern\n"
        "Pattern.objects.bulk_create([Pattern(kind='housecat', router='house', "
        f"name='{mark}-%03d' % n, built_queue='house:{mark}-%03d' % n) for n in range(130)])"
    )
    seen, count = pages(console, "/patterns/", mark)
    assert count >= 2
    names = [name for page in seen for name in dict.fromkeys(page)]
    assert sorted(names) == [f"{mark}-{n:03}" for n in range(130)]  # each on one page


def test_the_tokens_page_is_paged(service, console) -> None:
    mark = unique("tk")
    service.shell(
        "from xumpweb.wiring.models import ApiToken\n"
        f"for n in range(130): ApiToken.issue('{mark}-%03d' % n, {{'x': ['read']}})"
    )
    seen, count = pages(console, "/tokens/", mark)
    assert count >= 2
    names = [name for page in seen for name in dict.fromkeys(page)]
    assert sorted(names) == [f"{mark}-{n:03}" for n in range(130)]


def test_the_consumers_page_pages_what_the_queues_deliver_to(service, console) -> None:
    mark = unique("fd")
    queues = [{"name": f"{mark}-{n:03}"} for n in range(110)]
    selectors = [{"queue": q["name"], "when": "always", "action": "deliver",
                  "target": q["name"], "enabled": True} for q in queues]  # fmt: skip
    with service.client() as client:
        answer = client.post("/api/definitions", timeout=60,
                             json={"xump_definitions": 1, "queues": queues,
                                   "selectors": selectors})  # fmt: skip
        assert answer.status_code == 202, answer.text  # 220 changes: in steps
        follow = answer.json()["follow"]
        for _ in range(600):
            if client.get(follow).json()["state"] != "running":
                break
            time.sleep(0.1)
        assert client.get(follow).json()["state"] == "done"
    first = console.get("/consumers/")
    found = re.search(r"Feed pages.*?page 1 of (\d+)", first.text, re.S)
    assert found, first.text[:500]
    names = []
    for number in range(1, int(found[1]) + 1):
        page = console.get("/consumers/", params={"feeds": number}).text
        feeds = page[page.index('id="feeds"') :]
        assert feeds.count("<tr>") - 1 <= PAGE
        names += dict.fromkeys(re.findall(rf"{mark}-\d+", feeds))
    assert sorted(names) == [q["name"] for q in queues]
