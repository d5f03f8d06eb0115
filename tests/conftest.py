"""Servers the tests start for themselves, once per session."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A private redis-server on a free port, its data (AOF, fsync on every write) in a
    directory of its own. Tests may kill and restart it; nothing else uses it. `settings`:
    more redis-server options, after (so over) these."""

    def __init__(self, directory: Path, *settings: str) -> None:
        self.directory = directory
        self.settings = list(settings)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.directory), "--appendonly", "yes",
                "--appendfsync", "always", "--save", "", "--daemonize", "no",
                *self.settings,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the private redis-server did not start") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """kill -9: no shutdown, no final save."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


# == running in parallel (pytest-xdist; make test runs `-n auto --dist loadgroup`) ==========
# Each xdist worker is a pytest session of its own: its own private redis-server, service,
# browser and Spark session (session fixtures), on ports and directories of its own. Tests
# are handed out one by one, except those that share a fixture wider than a test: a
# module's tests that share a module-scoped service go to one worker together (else each
# worker would start that service again), and every test that uses the Spark session goes
# to one worker (one JVM, not one per worker).

SHARED_BY_GROUP = {"spark": "spark"}  # session fixtures that one worker should hold alone


def pytest_itemcollected(item) -> None:
    """Mark the item with its xdist group as it is collected (before xdist reads groups)."""
    if not item.config.pluginmanager.hasplugin("xdist"):
        return
    group = xdist_group_of(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


def xdist_group_of(item) -> str | None:
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return None
    scopes = {name: defs[-1].scope for name, defs in definitions.name2fixturedefs.items() if defs}
    for name, group in SHARED_BY_GROUP.items():
        if name in scopes:
            return group
    if any(scope in ("module", "class", "package") for scope in scopes.values()):
        return item.nodeid.split("::")[0]
    return None


def pytest_sessionfinish(session) -> None:
    """On an xdist worker: hand the figures the tests reported to the controller."""
    from tests.figures import SECTIONS

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["figures"] = dict(SECTIONS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """On the controller: the figures a worker's tests reported."""
    from tests.figures import SECTIONS

    SECTIONS.update(getattr(node, "workeroutput", {}).get("figures", {}))


def pytest_terminal_summary(terminalreporter) -> None:
    """The figures tests reported (tests/figures.py), after the run."""
    from tests.figures import SECTIONS

    for title, lines in SECTIONS.items():
        terminalreporter.write_sep("=", title)
        for line in lines:
            terminalreporter.write_line(line)
