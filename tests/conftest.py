"""Servers the tests start for themselves, once per session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a TCP socket listening on `port` (Linux's /proc):
    a free port can be taken by another process before a server binds it (tests run in
    several processes), and then the other's server answers on it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") in inodes:
                return True
        except OSError:
            continue
    return False


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
        self.started = False  # once started, restarts keep the port its clients know

    def start(self) -> None:
        """Start it and wait until it answers, itself: a free port can be taken by another
        process between `free_port` and the bind (tests run in several processes), and then
        another server would answer our ping, its data ours to flush. So the answer's
        process id must be ours; at the first start a taken port is given up for another."""
        for _ in range(5):
            if self._started():
                self.started = True
                return
            if self.started:
                raise RuntimeError(f"the private redis-server did not start on {self.port} again")
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
        raise RuntimeError("the private redis-server found no free port")

    def _started(self) -> bool:
        """Whether it now listens on `port` and answers there (False: its port was taken)."""
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
                answered = redis.Redis(port=self.port).info("server")["process_id"]
            except redis.ConnectionError:
                answered = None
            if answered == self.process.pid:
                return True
            if self.process.poll() is not None:  # it could not listen: the port is taken
                self.process = None
                return False
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("the private redis-server did not start")
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


@pytest.fixture
def unix_redis():
    """A private redis-server listening on a unix socket too (the socket's path at most
    107 bytes: under /tmp); the server and the socket's path."""
    with tempfile.TemporaryDirectory(prefix="xr", dir="/tmp") as directory:
        socket_path = f"{directory}/redis.sock"
        server = RedisServer(Path(directory), "--unixsocket", socket_path,
                             "--unixsocketperm", "700")  # fmt: skip
        server.start()
        try:
            yield server, socket_path
        finally:
            server.stop()


class RedisCluster:
    """A private 3-node Redis Cluster (no replicas), every node on AOF with fsync on every
    write, in a directory of its own. Ports below 55536: each node's cluster bus listens
    on its port + 10000. `url`: a URL of one node (with `?cluster=true`, what a store on
    the cluster is given); `node_urls`: each node's plain URL. `settings`: more
    redis-server options for every node."""

    NODES = 3

    def __init__(self, directory: Path, *settings: str) -> None:
        self.directory = directory
        self.settings = list(settings)
        self.ports = cluster_ports(self.NODES)
        self.processes: list[subprocess.Popen] = []
        self.node_urls = [f"redis://127.0.0.1:{port}/0" for port in self.ports]
        self.url = self.node_urls[0] + "?cluster=true"

    def start(self) -> None:
        import redis

        for port in self.ports:
            (self.directory / str(port)).mkdir(parents=True)
            self.processes.append(self._node(port))
        clients = [redis.Redis(port=port, socket_timeout=5) for port in self.ports]
        for client, process in zip(clients, self.processes, strict=True):
            until(lambda c=client: _answers(c), process, "a cluster node did not start")
        created = subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *[f"127.0.0.1:{port}" for port in self.ports],
                "--cluster-replicas", "0", "--cluster-yes",
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        # every node must know every slot's owner before a client may rely on any of them
        for client, process in zip(clients, self.processes, strict=True):
            until(lambda c=client: _cluster_ok(c), process, "the cluster did not become ok")
        for client in clients:
            client.close()

    def _node(self, port: int) -> subprocess.Popen:
        command = [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(self.directory / str(port)), "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf", "--appendonly", "yes",
            "--appendfsync", "always", "--save", "", "--daemonize", "no",
            *self.settings,
        ]  # fmt: skip
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill_node(self, port: int) -> None:
        """kill -9 of the node on `port`: no shutdown, no final save."""
        process = self.processes[self.ports.index(port)]
        process.kill()
        process.wait()

    def restart_node(self, port: int) -> None:
        """Start the node on `port` again on its AOF and cluster config; returns once the
        cluster is ok again (as seen from every node)."""
        import redis

        number = self.ports.index(port)
        self.processes[number] = process = self._node(port)
        clients = [redis.Redis(port=each, socket_timeout=5) for each in self.ports]
        until(lambda: _answers(clients[number]), process, "the node did not start again")
        for client, each in zip(clients, self.processes, strict=True):
            until(lambda c=client: _cluster_ok(c), each, "the cluster did not become ok again")
        for client in clients:
            client.close()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            process.wait(timeout=10)
        self.processes = []


def cluster_ports(count: int) -> list[int]:
    """`count` free ports, each with its cluster bus port (+ 10000) free too: from 20000 to
    22767, so that the bus ports (30000 to 32767) stay below the kernel's ephemeral range
    (32768 and up, where every outgoing connection takes a port) and cannot be taken by
    one between this probe and the server's start. Never 6379 (the machine's own Redis)."""
    import random

    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 22768)
        if port in ports:
            continue
        if _bindable(port) and _bindable(port + 10000):
            ports.append(port)
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _answers(client) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _cluster_ok(client) -> bool:
    return client.cluster("INFO").get("cluster_state") == "ok"  # redis-py parses it


def until(condition, process: subprocess.Popen, failure: str, timeout: float = 30) -> None:
    """Wait for `condition()` (looked at every 10 ms); RuntimeError(failure) when the
    process died or the time ran out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(failure)
        time.sleep(0.01)


def start_cluster(directory: Callable[[], Path], *settings: str) -> RedisCluster:
    """A started RedisCluster in a new `directory()`; tried again on other ports when a
    node does not start (another test's cluster may have taken a port since the probe)."""
    for attempt in range(3):
        cluster = RedisCluster(directory(), *settings)
        try:
            cluster.start()
            return cluster
        except BaseException:  # never leave a node running
            cluster.stop()
            if attempt == 2 or not isinstance(sys.exc_info()[1], RuntimeError):
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """The session's private Redis Cluster (started on first use, stopped at the end); each
    test keeps its keys apart by store names of its own (their hash tags)."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are not installed (apt-get install redis-server)")
    started = time.monotonic()
    cluster = start_cluster(lambda: tmp_path_factory.mktemp("redis-cluster"))
    from tests.figures import report

    took = time.monotonic() - started
    report("Redis Cluster fixture", [f"3 nodes started, joined and ok in {took:.2f} s"])
    yield cluster
    cluster.stop()


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

    for title, lines in getattr(node, "workeroutput", {}).get("figures", {}).items():
        # a table whose rows came from tests on several workers: one table, each row once
        kept = SECTIONS.setdefault(title, [])
        kept.extend(line for line in lines if line not in kept)


def pytest_terminal_summary(terminalreporter) -> None:
    """The figures tests reported (tests/figures.py), after the run."""
    from tests.figures import SECTIONS

    for title, lines in SECTIONS.items():
        terminalreporter.write_sep("=", title)
        for line in lines:
            terminalreporter.write_line(line)
