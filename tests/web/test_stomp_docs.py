"""docs/stomp.md's Python examples, and README's STOMP example, run as written: each
```python block that starts with `# <name>.py:` runs as a script against the test service,
with the documented port, token and names swapped for the test's (each swap must find what
it replaces, so the doc cannot drift from what is tested)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.web.conftest import ROOT, unique

DOC = ROOT / "docs" / "stomp.md"
README = ROOT / "README.md"
TESTED = {"worker.py", "batch.py", "prices.py"}


def example(name: str, doc: Path = DOC) -> str:
    blocks = dict(re.findall(r"```python\n(# (\S+\.py): .*?)```", doc.read_text(), re.S))
    (code,) = [code for code, found in blocks.items() if found == name]
    return code


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def swapped(code: str, swaps: dict[str, str]) -> str:
    for documented, tested in swaps.items():
        assert documented in code, f"the example no longer holds {documented!r}"
        code = code.replace(documented, tested)
    return code


def run(service, code: str, directory: Path) -> list[str]:
    script = directory / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=directory)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def tcp(service, stomp_port) -> dict[str, str]:
    """The swaps of an example over TCP: the token and the STOMP port."""
    return {'"xump_..."': repr(service.admin_token),
            '("127.0.0.1", 61613)': f'("127.0.0.1", {stomp_port})'}  # fmt: skip


@pytest.fixture
def websocket(service) -> dict[str, str]:
    """The swaps of an example over WebSocket: the token and the web server's port."""
    web_port = service.url.rsplit(":", 1)[1]
    return {'"xump_..."': repr(service.admin_token),
            '("127.0.0.1", 8000)': f'("127.0.0.1", {web_port})'}  # fmt: skip


def test_every_python_example_is_tested() -> None:
    found = re.findall(r"```python\n# (\S+\.py): ", DOC.read_text())
    assert set(found) == TESTED and len(found) == len(TESTED)


def test_the_tcp_worker_example_runs(service, tcp, tmp_path):
    router, worker = unique("jobs"), unique("w")
    with service.client() as client:
        wolfpack = {"kind": "wolfpack", "router": router, "name": worker, "credit": 100}
        assert client.post("/api/patterns", json=wolfpack).status_code == 201
        code = swapped(example("worker.py"), {**tcp, "/queue/jobs": f"/queue/{router}",
                                              "/queue/w1": f"/queue/{worker}"})  # fmt: skip
        lines = run(service, code, tmp_path)
        assert lines == [
            "stored job-0", "stored job-1", "stored job-2",
            "working on job 0 redelivered: false", "working on job 1 redelivered: false",
            "working on job 2 redelivered: false",
        ]  # fmt: skip
        worker_queue = f"/api/queues/{router}:{worker}/stats"
        assert wait_for(lambda: client.get(worker_queue).json()["confirmed"] == 3)
        assert client.get(worker_queue).json()["outstanding"] == 0


def test_the_transaction_example_runs(service, tcp, tmp_path):
    queue = unique("jobs")
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        run(service, swapped(example("batch.py"), {**tcp, "/queue/jobs": f"/queue/{queue}"}),
            tmp_path)  # fmt: skip
        # durable when the script ends; routed (counted) a moment later
        assert wait_for(lambda: client.get(f"/api/queues/{queue}/stats").json()["depth"] == 2)


def test_the_websocket_example_runs(service, websocket, tmp_path):
    word = unique("prices").replace("-", "")
    code = swapped(example("prices.py"), {**websocket, "/topic/prices.": f"/topic/{word}."})
    lines = run(service, code, tmp_path)
    assert lines == [f"/topic/{word}.acme 12.5", f"/topic/{word}.bolt 3"]


def test_the_readme_example_runs(service, tcp, tmp_path):
    router, worker = unique("jobs"), unique("w")
    with service.client() as client:
        wolfpack = {"kind": "wolfpack", "router": router, "name": worker, "credit": 100}
        assert client.post("/api/patterns", json=wolfpack).status_code == 201
    code = swapped(example("stomp_worker.py", README), {
        **tcp, "/queue/jobs": f"/queue/{router}", "/queue/w1": f"/queue/{worker}"})  # fmt: skip
    (line,) = run(service, code, tmp_path)
    assert line.endswith(" job 1")
