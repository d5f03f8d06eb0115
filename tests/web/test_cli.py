"""`python manage.py xump ...` against the running service, as operators' scripts use it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.relay import RelayClient
from tests.web.conftest import ROOT, unique


@pytest.fixture(scope="module")
def xump(service):
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "xump", *args], cwd=ROOT, env=service.env,
            input=stdin, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    return run


def wolfpack(relay: RelayClient, worker: str) -> str:
    """A service queue whose messages are delivered to `worker`."""
    service = unique("jobs")
    relay.call("pattern_build", kind="wolfpack", name=worker, router=service, credit=-1)
    return service


def test_build_a_pattern_publish_a_batch_file_subscribe_and_list(xump, tmp_path):
    worker, service = unique("w"), unique("jobs")
    built = xump("pattern", "wolfpack", service, worker, "--credit", "-1")
    assert built.returncode == 0, built.stderr
    assert f"queue {service}:{worker}" in built.stdout
    lines = [json.dumps({"address": f"job.{n}", "headers": {"n": n}, "body": f"job {n}"})
             for n in range(250)]  # fmt: skip
    lines.insert(100, "")  # blank lines are skipped
    batch = tmp_path / "jobs.jsonl"
    batch.write_text("\n".join(lines) + "\n")

    published = xump("publish", service, "--file", str(batch), "--batch", "100", "--progress")
    assert published.returncode == 0, published.stderr
    assert published.stdout.startswith(f"published 250 messages to {service}")
    assert "250/250" in published.stderr  # the progress bar, drawn to the end

    taken = xump("subscribe", worker, "--count", "250")
    assert taken.returncode == 0, taken.stderr
    deliveries = [json.loads(line) for line in taken.stdout.splitlines()]
    assert [d["message"]["body"] for d in deliveries] == [f"job {n}" for n in range(250)]
    assert deliveries[7]["message"]["headers"] == {"n": 7}
    assert {d["destination"] for d in deliveries} == {worker}

    listed = xump("queues")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:5] == ["QUEUE", "STORE", "UNPROCESSED", "HISTORY", "OUTSTANDING"]
    private = next(row.split() for row in rows if row.startswith(f"{service}:{worker} "))
    assert private[2:5] == ["0", "0", "0"]  # every delivery was confirmed by subscribe

    selectors = xump("selectors", service, "--json")
    [move] = json.loads(selectors.stdout)
    assert (move["action"], move["target"]) == ("move", f"{service}:{worker}")


def test_publish_one_message_with_headers_and_a_body_from_stdin(xump, relay):
    worker = unique("w")
    service = wolfpack(relay, worker)
    one = xump("publish", service, "-a", "orders.eu", "-H", "priority=7", "-H", "region=eu",
               "-H", "vip=true", "-H", 'code="42"', stdin="from stdin \u00e9")  # fmt: skip
    assert one.returncode == 0, one.stderr
    mid = one.stdout.strip()
    two = xump("publish", service, "second body")
    assert two.returncode == 0, two.stderr

    taken = xump("subscribe", worker, "-n", "2", "--no-confirm")
    first, second = (json.loads(line) for line in taken.stdout.splitlines())
    assert first["message"]["mid"] == mid
    assert first["message"]["address"] == "orders.eu"
    assert first["message"]["headers"] == {"priority": 7, "region": "eu", "vip": True,
                                           "code": "42"}  # fmt: skip
    assert first["message"]["body"] == "from stdin \u00e9"
    assert second["message"]["body"] == "second body"
    # --no-confirm: both stay outstanding
    assert relay.call("stats", queue=f"{service}:{worker}")["outstanding"] == 2


def test_subscribe_stops_when_idle(xump):
    quiet = xump("subscribe", unique("nobody"), "--idle", "1")
    assert quiet.returncode == 0 and quiet.stdout == ""


@pytest.fixture(scope="module")
def bad_batch(tmp_path_factory):
    batch = tmp_path_factory.mktemp("cli") / "bad.jsonl"
    batch.write_text('{"body": "fine"}\n{"body": 5}\nnot json\n')
    return str(batch)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("publish", "no-such-queue", "x"), "queue 'no-such-queue' does not exist"),
        (("publish", "q", "x", "-H", "1bad=2"), "must start with a letter"),
        (("publish", "{queue}", "--file", "{bad_batch}"), "line 2: body must be a string"),
        (("publish", "{queue}", "x", "-H", "h=NaN"), "header 'h' is not a finite number"),
        (("publish", "{queue}", "--file", "{deep_batch}"), "line 1: not valid JSON"),
    ],
    ids=["no-queue", "bad-header-name", "bad-line", "nan-header", "deep-json-line"],
)
def test_errors_are_one_line_and_exit_status_1(xump, relay, bad_batch, args, says):
    queue = wolfpack(relay, unique("w"))
    deep_batch = bad_batch.replace("bad.jsonl", "deep.jsonl")
    with open(deep_batch, "w") as deep:
        deep.write('{"json": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    failed = xump(*(arg.format(queue=queue, bad_batch=bad_batch, deep_batch=deep_batch)
                    for arg in args))  # fmt: skip
    assert failed.returncode == 1
    assert failed.stderr.startswith("xump: error: ")
    assert says in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
