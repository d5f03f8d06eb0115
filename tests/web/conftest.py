"""The service as users meet it: the ASGI server in a subprocess on a free port, on the
session's private redis-server, with its own SQLite database and its own Redis store name.

`service` routes inline (in the server process); `worker_service` routes in a real Celery
worker process. The test process also sets Django up on the same database (not the same
Redis keys), so tests can make users and tokens through the models.

`in_django` is Django's test client in a process of its own (tests/web/in_django.py), for
requests with settings overridden per request (the shards' views with XUMP_SHARDS=4).

The STOMP tests' fixtures are here too, for every file that speaks STOMP: `transport` (a
test asking for it runs over TCP and over WebSocket), `connect`, `clients` and
`durable_client` (stomp.py clients, tests/web/stomp_clients.py), and `http`.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
import stomp

from engine.relay import RelayClient
from tests.conftest import RedisServer, free_port, listens
from tests.web.in_django import InDjango
from tests.web.stomp_clients import TRANSPORTS, Client, disconnect_all, stomp_connection

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


@dataclass
class Service:
    url: str
    ws_url: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    admin_token: str = ""

    def client(self, token: str | None = None, **options) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        # a generous deadline, not a margin: on a loaded machine a first call that waits for
        # a Celery worker to boot and take the lease took more than 30 s
        options.setdefault("timeout", 120)
        return httpx.Client(base_url=self.url, headers=headers, **options)

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip

    def shell(self, code: str) -> str:
        """Run `code` in `manage.py shell` (Django set up on the service's database); what it
        printed, its last line first to hand (a token's secret, say)."""
        made = self.manage("shell", "-c", code)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def relay(self) -> RelayClient:
        """A client sending the relay commands the API itself sends (close it when done)."""
        return RelayClient(self.env["XUMP_REDIS_URL"], self.env["XUMP_STORE"])

    def start_worker(self, name: str = "worker") -> subprocess.Popen:
        """A Celery worker process (threads pool), logging to the service's directory."""
        log = open(Path(self.env["XUMP_TEST_DIR"]) / f"{name}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "xumpweb", "worker", "--pool", "threads",
             "--concurrency", "4", "--loglevel", "WARNING", "--without-gossip",
             "--without-mingle", "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.processes[name] = process
        return process

    def start_web(self, name: str, **settings: str) -> Service:
        """Another web process (ASGI server) of this service, on a free port, over the same
        database, Redis and store; a Service that reaches it, its process under "server".
        `settings`: more environment (XUMP_...=value)."""
        log = Path(self.env["XUMP_TEST_DIR"]) / f"{name}.log"
        env = {**self.env, **settings}
        for _ in range(3):  # a port found free may be taken before the server binds it
            port = free_port()
            process = _serve(env, port, log)
            other = Service(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", env,
                            {"server": process}, self.admin_token)  # fmt: skip
            if _answers(other.url, process):
                return other
            other.stop("server", kill=True)
        raise RuntimeError(f"the web process {name} did not start; see {log}")

    def start_stomp(self, name: str = "stomp", port: int | None = None, **settings: str) -> int:
        """The STOMP TCP server (`manage.py stomp_server`) on `port` (default: a free one,
        e.g. the one a killed server had, for its clients to come back to); the port, once it
        accepts connections. `settings`: more environment (XUMP_...=value)."""
        for _ in range(1 if port else 3):  # a free port may be taken before it binds it
            listening = port or free_port()
            log = open(Path(self.env["XUMP_TEST_DIR"]) / f"{name}.log", "ab")  # noqa: SIM115
            process = subprocess.Popen(
                [PYTHON, "manage.py", "stomp_server", "--port", str(listening)],
                cwd=ROOT, env={**self.env, **settings}, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            self.processes[name] = process
            deadline = time.monotonic() + 30
            while process.poll() is None and time.monotonic() < deadline:
                if listens(process.pid, listening):  # itself, not another's on the port
                    socket.create_connection(("127.0.0.1", listening), timeout=2).close()
                    return listening
                time.sleep(0.1)
            self.stop(name, kill=True)
        raise RuntimeError(f"the STOMP server did not start; see {name}.log")

    def stop(self, name: str, kill: bool = False) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop every process, all at once (SIGTERM, then kill -9 after 20 s)."""
        stopping = list(self.processes.values())
        self.processes.clear()
        for process in stopping:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in stopping:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _serve(env: dict[str, str], port: int, log_path: Path) -> subprocess.Popen:
    """The ASGI server (uvicorn) on `port`, logging to `log_path`."""
    log = open(log_path, "ab")  # noqa: SIM115
    return subprocess.Popen(
        [PYTHON, "-m", "uvicorn", "xumpweb.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log",
         "--ws-per-message-deflate", "false"],  # as the Procfile runs it
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _answers(url: str, process: subprocess.Popen, within: float = 30.0) -> bool:
    """Whether `process` listens at `url` and answers /api/health there before `within`
    seconds pass (and before it ends: another process may have taken the port first)."""
    deadline = time.monotonic() + within
    port = int(url.rsplit(":", 1)[1])
    while True:
        if listens(process.pid, port):
            try:
                if httpx.get(url + "/api/health", timeout=2).status_code < 500:
                    return True
            except httpx.HTTPError:
                pass
        if time.monotonic() > deadline or process.poll() is not None:
            return False
        time.sleep(0.1)


def django_script(redis_url: str, directory: Path, code: str) -> dict:
    """Run `code` (a script that sets Django up, on the session's redis-server, as a client
    only) in a Python process of its own, and read the JSON object its last printed line
    holds: for tests of the service's parts that need Django, which the test process never
    sets up."""
    env = _environment(redis_url, directory, "inline")
    ran = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, f"the script did not run: {ran.stderr[-3000:]}"
    return json.loads(ran.stdout.strip().splitlines()[-1])


def _environment(redis_url: str, directory: Path, routing: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XUMP_", "DJANGO_"))}
    env.update(
        XUMP_REDIS_URL=redis_url,
        XUMP_STORE=f"t{uuid.uuid4().hex[:10]}",
        XUMP_ROUTING=routing,
        XUMP_SECRET_KEY="test-secret-key-not-for-production",
        XUMP_ALLOWED_HOSTS="127.0.0.1,localhost",
        XUMP_LEASE_MS="2000",
        XUMP_DELIVERY_TIMEOUT="60",
        DATABASE_URL=f"sqlite:///{directory}/xump.sqlite3",
        DJANGO_SETTINGS_MODULE="xumpweb.settings_test",
        XUMP_TEST_DIR=str(directory),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


# the first service of a test process migrates its database and makes the admin login and
# token (two Django processes, about 3 s); the others start from a copy of that database
_TEMPLATE: dict[str, tuple[Path, str]] = {}


def _database(service: Service, directory: Path) -> str:
    """A migrated database with the admin login and an admin token at the service's
    DATABASE_URL (under `directory`); the token's secret."""
    own = directory / "xump.sqlite3"
    copied = service.env["DATABASE_URL"] == f"sqlite:///{own}"
    made = _TEMPLATE.get(service.env["XUMP_SECRET_KEY"])
    if copied and made is not None:
        template, token = made
        _copy_database(template, own)
        return token
    migrated = service.manage("migrate", "--noinput", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    printed = service.shell(
        "from xumpweb.wiring.models import ApiToken\n"
        "from django.contrib.auth.models import User\n"
        "User.objects.create_superuser('admin', '', 'admin-password')\n"
        "print(ApiToken.issue('tests', {'*': ['publish', 'consume', 'manage']})[1])"
    )
    token = printed.splitlines()[-1]
    if copied:
        kept = tempfile.mkdtemp(prefix="xump-template-")
        atexit.register(shutil.rmtree, kept, True)
        _copy_database(own, Path(kept) / "xump.sqlite3")
        _TEMPLATE[service.env["XUMP_SECRET_KEY"]] = (Path(kept) / "xump.sqlite3", token)
    return token


def _copy_database(source: Path, target: Path) -> None:
    """SQLite's online backup of `source` into `target` (a new file)."""
    with closing(sqlite3.connect(source)) as reading, closing(sqlite3.connect(target)) as writing:
        reading.backup(writing)


def start_service(redis_url: str, directory: Path, routing: str, **settings: str) -> Service:
    """The ASGI server on a free port; `settings`: more environment (XUMP_...=value)."""
    env = _environment(redis_url, directory, routing)
    env.update(settings)
    port = free_port()
    service = Service(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", env)
    service.admin_token = _database(service, directory)
    for _ in range(3):  # a port found free may be taken before the server binds it
        service.processes["server"] = _serve(env, port, directory / "server.log")
        if _answers(service.url, service.processes["server"]):
            return service
        service.stop("server", kill=True)
        port = free_port()
        service.url, service.ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    service.close()
    raise RuntimeError(f"the server did not start; see {directory / 'server.log'}")


@pytest.fixture(scope="session")
def service(redis_server, tmp_path_factory):
    """The service routing inline, shared by the tests of a session (use unique names)."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("service"), "inline")
    yield running
    running.close()


@pytest.fixture
def relay(service) -> Iterator[RelayClient]:
    """A relay client on `service`'s store."""
    with closing(service.relay()) as client:
        yield client


def take_from_relay(relay: RelayClient, destination: str, count: int, within: float = 30.0) -> list:
    """Up to `count` deliveries to `destination`, waiting at most `within` seconds for them."""
    found: list = []
    deadline = time.monotonic() + within
    while len(found) < count and time.monotonic() < deadline:
        found.extend(relay.deliveries(destination, count=count - len(found), wait=0.5))
    return found


@contextmanager
def trace_lines(service: Service) -> Iterator[Callable[[str], dict[str, float]]]:
    """The store's trace channel (engine/relay/trace.py), subscribed before the messages
    go: yields `read(mid)`, which waits (30 s at most) for the three lines of the traced
    message `mid` (its inbox append, routing step and frame written) and gives {hop: time};
    a line of any other message fails the test."""
    from engine.relay.trace import parse_line, trace_channel

    client = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    listening = client.pubsub(ignore_subscribe_messages=True)
    listening.subscribe(trace_channel(service.env["XUMP_STORE"]))

    def read(mid: str) -> dict[str, float]:
        lines: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while len(lines) < 3 and time.monotonic() < deadline:
            found = listening.get_message(timeout=0.5)
            if found is not None:
                hop, at, mids = parse_line(found["data"])
                assert mids == [mid], (hop, mids)
                lines[hop] = at
        return lines

    try:
        yield read
    finally:
        listening.close()
        client.close()


@pytest.fixture(scope="session")
def stomp_port(service):
    """The STOMP TCP server of `service` (one per session); its port."""
    return service.start_stomp()


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    """The STOMP transport of the test: each test asking for it runs over both."""
    return request.param


@pytest.fixture
def connect(service, stomp_port) -> Iterator[Callable[..., Client]]:
    """Connect stomp.py clients, each over the transport named ("tcp" or "websocket"); all
    are disconnected at the end of the test."""
    made: list[Client] = []

    def connect_over(over: str, token: str | None = None, auto_ack: bool = False,
                     version: str = "1.2", **options) -> Client:  # fmt: skip
        client = Client(stomp_connection(service, stomp_port, over, version, **options), auto_ack)
        client.connection.connect("tests", token or service.admin_token, wait=True)
        made.append(client)
        return client

    yield connect_over
    disconnect_all(made)


@pytest.fixture
def clients(connect, transport) -> Callable[..., Client]:
    """Connect stomp.py clients over the test's transport (see `connect`)."""
    return functools.partial(connect, transport)


@pytest.fixture
def durable_client(service, stomp_port) -> Iterator[Callable[..., Client | None]]:
    """Connect stomp.py clients with a client-id over a transport: the Client, or None when
    the server refused the CONNECT; all are disconnected at the end of the test."""
    made: list[Client] = []

    def make(
        over: str, client_id: str, auto_ack: bool = False, token: str | None = None
    ) -> Client | None:
        client = Client(stomp_connection(service, stomp_port, over), auto_ack)
        made.append(client)
        try:
            client.connection.connect(
                "tests", token or service.admin_token, headers={"client-id": client_id},
                wait=True,
            )  # fmt: skip
        except stomp.exception.StompException:
            return None
        return None if client.errors else client

    yield make
    disconnect_all(made)


@pytest.fixture
def http(service) -> Iterator[httpx.Client]:
    """An HTTP client of `service` with the admin token."""
    with service.client() as client:
        yield client


@pytest.fixture(scope="module")
def worker_service(redis_server, tmp_path_factory):
    """The service with routing in a real Celery worker (one per test module)."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("worker"), "worker")
    running.start_worker()
    yield running
    running.close()


def service_with_own_redis(
    directory: Path, **settings: str
) -> Iterator[tuple[Service, RedisServer]]:
    """The service on a redis-server of its own, both of which a test may stop or kill
    (a generator for fixtures: `yield from service_with_own_redis(tmp_path)`); `settings`:
    more environment (XUMP_...=value)."""
    (directory / "redis").mkdir()
    (directory / "service").mkdir()
    redis_server = RedisServer(directory / "redis")
    redis_server.start()
    running = start_service(redis_server.url, directory / "service", "inline", **settings)
    yield running, redis_server
    running.close()
    redis_server.stop()


def wait_for(check, within: float = 10.0, every: float = 0.1):
    """`check()`'s first true answer, asked every `every` seconds; its last (false) answer
    once `within` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(every)


def eventually(check, what: str, within: float = 20.0, every: float = 0.05):
    """`check()`'s first true answer, asked every `every` seconds; fails, naming `what`,
    once `within` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within} s for {what}")
        time.sleep(every)


def create_queues(redis_url: str, store: str, names: list[str], threads: int = 8) -> None:
    """Create the queues through `threads` relay clients at once (one per thread)."""

    def create(chunk: list[str]) -> None:
        with closing(RelayClient(redis_url, store)) as client:
            for name in chunk:
                client.call("queue_create", name=name)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, [names[i::threads] for i in range(threads)]))


def unique(prefix: str = "q") -> str:
    """A queue or destination name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def delivering_queue(relay: RelayClient) -> tuple[str, str]:
    """A new queue whose one DELIVER selector feeds a new destination, made through the
    relay (a router must be running): (queue, destination)."""
    queue, destination = unique(), unique("d")
    relay.call("queue_create", name=queue, timeout=60)
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    return queue, destination


CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')  # a console form's token


@contextmanager
def console_login(url: str) -> Iterator[httpx.Client]:
    """An httpx client logged in to the console as the admin (through the login form)."""
    with httpx.Client(base_url=url, timeout=120) as client:
        token = CSRF.search(client.get("/login/").text)[1]
        fields = {"csrfmiddlewaretoken": token, "username": "admin", "password": "admin-password"}
        answer = client.post("/login/", data=fields)
        assert answer.status_code == 302, answer.text
        yield client


def console_form(console: httpx.Client, path: str, **fields) -> tuple[httpx.Response, dict]:
    """A console page and the form to post back to it: the page's CSRF token and `fields`."""
    page = console.get(path)
    return page, {"csrfmiddlewaretoken": CSRF.search(page.text)[1], **fields}


@pytest.fixture
def console(service):
    """An httpx client logged in to the console as the admin."""
    with console_login(service.url) as client:
        yield client


@pytest.fixture(scope="module")
def in_django(redis_server, tmp_path_factory) -> Iterator[InDjango]:
    """Django's test client in a process of its own (tests/web/in_django.py), on the
    session's redis-server: for requests with settings overridden (XUMP_SHARDS=4)."""
    directory = tmp_path_factory.mktemp("in-django")
    env = _environment(redis_server.url, directory, "inline")
    env["XUMP_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    driven = InDjango(env)
    yield driven
    driven.close()
