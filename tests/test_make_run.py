"""`make run`'s plumbing: the Redis it ensures and the processes its Procfile names.

`make run` itself blocks until Ctrl-C, so it is tried by hand (README: Two commands); these
run the pieces it is made of."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis
import stomp
from honcho.environ import parse_procfile
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[1]


def ensure_redis(action: str, var: Path, url: str, path: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XUMP_")}
    env["XUMP_REDIS_URL"] = url
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "scripts/ensure_redis.py", action, "--var", str(var)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def answers(port: int) -> bool:
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        return client.ping()
    except redis.ConnectionError:
        return False


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie that init has not reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def redis_installed():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")


def test_it_starts_a_redis_server_with_its_data_under_var_and_stops_it(tmp_path, redis_installed):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    started = ensure_redis("start", tmp_path, url)
    try:
        assert started.returncode == 0, started.stderr
        assert "Started redis-server" in started.stdout
        assert answers(port)
        config = redis.Redis(port=port).config_get("*")
        assert Path(config["dir"]) == (tmp_path / "redis").resolve()
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always"
        assert (tmp_path / "redis" / "appendonlydir").is_dir()
        pid = int((tmp_path / "redis" / "started.pid").read_text())
        assert pid == redis.Redis(port=port).info("server")["process_id"]

        again = ensure_redis("start", tmp_path, url)  # answers now: used as it is
        assert again.returncode == 0 and "Redis answers" in again.stdout
    finally:
        stopped = ensure_redis("stop", tmp_path, url)
    assert stopped.returncode == 0, stopped.stderr
    assert not answers(port)
    assert not (tmp_path / "redis" / "started.pid").exists()
    assert not running(pid)


def test_it_uses_a_redis_that_answers_and_never_stops_it(tmp_path, redis_server):
    used = ensure_redis("start", tmp_path, redis_server.url)
    assert used.returncode == 0, used.stderr
    assert "Redis answers" in used.stdout
    assert not (tmp_path / "redis").exists()
    stopped = ensure_redis("stop", tmp_path, redis_server.url)
    assert stopped.returncode == 0
    assert answers(redis_server.port)


def test_it_names_the_apt_command_when_redis_server_is_missing(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    missing = ensure_redis("start", tmp_path, url, path=str(tmp_path))
    assert missing.returncode == 1
    assert "sudo apt-get install redis-server" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1  # one line, no traceback


def test_it_refuses_to_start_a_server_for_a_remote_url(tmp_path):
    missing = ensure_redis("start", tmp_path, "rediss://127.0.0.1:1/0")
    assert missing.returncode == 1
    assert "can only be started here" in missing.stderr


def test_the_procfile_names_web_worker_beat_and_stomp():
    processes = parse_procfile((ROOT / "Procfile").read_text()).processes
    assert set(processes) == {"web", "worker", "beat", "stomp"}
    for name, command in processes.items():  # each restarted if it dies (keep_running.sh)
        assert command.startswith("scripts/keep_running.sh "), name
        processes[name] = command.removeprefix("scripts/keep_running.sh ")
    assert processes["web"].startswith("uvicorn xumpweb.asgi:application --host ")
    assert "--port " in processes["web"]
    # uncompressed WebSocket frames, as the tests' servers run it (tests/web/conftest.py)
    assert "--ws-per-message-deflate false" in processes["web"]
    assert processes["worker"].startswith("celery -A xumpweb worker --pool threads")
    assert processes["beat"].startswith("celery -A xumpweb beat --schedule var/")
    assert processes["stomp"] == "python manage.py stomp_server"  # on XUMP_STOMP_PORT


# -- `make run` under Redis restarts ----------------------------------------------------------
class _Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def on_receipt(self, frame) -> None:
        self.ids.add(frame.headers["receipt-id"])


def _make_run_environment(tmp_path: Path, redis_url: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XUMP_", "DJANGO_"))}
    env.update(
        ADDRESS=f"127.0.0.1:{port}",
        XUMP_STOMP_PORT=str(free_port()),
        VENV=str(Path(sys.executable).parent.parent),
        XUMP_REDIS_URL=redis_url,
        XUMP_STORE=f"t{uuid.uuid4().hex[:10]}",
        XUMP_SECRET_KEY="test-secret-key-not-for-production",
        XUMP_ADMIN_PASSWORD="admin-password",
        XUMP_LEASE_MS="2000",
        XUMP_DELIVERY_TIMEOUT="5",  # acks lost with Redis come back quickly
        DATABASE_URL=f"sqlite:///{tmp_path}/xump.sqlite3",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),  # not the checkout's var/metrics
        PYTHONUNBUFFERED="1",
    )
    return env


def _spawn_make_run(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """scripts/run.sh (what `make run` runs) in a session of its own, logging to a file."""
    log = open(tmp_path / "make-run.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        ["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            found[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), line)
    return found


def _descendants(pid: int) -> list[int]:
    table = _processes()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [p for p, (pp, _) in table.items() if pp == parent and running(p)]
        found += children
        todo += children
    return found


def _worker_pid(root: int) -> int | None:
    """The Celery worker's pid among `root`'s descendants."""
    table = _processes()
    for pid in _descendants(root):
        parent, line = table.get(pid, (0, ""))
        watcher = table.get(parent, (0, ""))[1]  # keep_running.sh runs the worker itself
        if "keep_running" not in line and "keep_running.sh celery -A xumpweb worker" in watcher:
            return pid
    return None


class _Traffic:
    """Publishes numbered messages one after another (noting which got a 202) while a
    WebSocket subscriber takes their deliveries and acks them, reconnecting whenever its
    connection ends."""

    def __init__(self, base: str, token: str, queue: str, destination: str) -> None:
        self.http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.ws_url = f"ws{base[4:]}/ws/subscribe/{destination}/?token={token}"
        self.queue = queue
        self.accepted: list[str] = []
        self.refused = 0  # 503s and connection errors
        self.received: list[tuple[str, bool]] = []  # (body, redelivered)
        self.stopped = threading.Event()
        self.publishing = threading.Event()
        self.threads = [threading.Thread(target=self._publish, daemon=True),
                        threading.Thread(target=self._subscribe, daemon=True)]  # fmt: skip

    def start(self) -> None:
        self.publishing.set()
        for thread in self.threads:
            thread.start()

    def _publish(self) -> None:
        number = 0
        while not self.stopped.is_set():
            if not self.publishing.is_set():
                time.sleep(0.05)
                continue
            number += 1
            try:
                answer = self.http.post(f"/api/queues/{self.queue}/publish",
                                        json={"body": str(number)})  # fmt: skip
            except httpx.HTTPError:
                self.refused += 1
                time.sleep(0.05)
                continue
            if answer.status_code == 202:
                self.accepted.append(str(number))
            else:
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"] == "store_unavailable", answer.text
                self.refused += 1
                time.sleep(0.05)
            time.sleep(0.005)

    def _subscribe(self) -> None:
        from websockets.sync.client import connect

        while not self.stopped.is_set():
            try:
                with connect(self.ws_url, open_timeout=5) as socket:
                    socket.send(json.dumps({"type": "credit", "n": 100_000}))
                    while not self.stopped.is_set():
                        try:
                            frame = json.loads(socket.recv(timeout=0.5))
                        except TimeoutError:
                            continue
                        if frame["type"] == "delivery":
                            self.received.append((frame["message"]["body"], frame["redelivered"]))
                            socket.send(json.dumps({"type": "ack", "tag": frame["tag"]}))
            except Exception:  # the server closed it, or is not there: connect again
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.http.close()


@pytest.mark.timeout(150)
def test_make_run_rides_out_three_redis_restarts_under_traffic(tmp_path, redis_installed):
    """The worker used to exit ("Unrecoverable error: 'NoneType' object has no attribute
    'hostname'", xumpweb/broker.py) when Redis went away mid-route, and honcho then stopped
    web and beat: make run ended. Now every process rides it out (two `redis-cli shutdown`s
    and a kill -9, each restarted on the same port and AOF) and routing resumes; every
    publish answered 202 is delivered."""
    (tmp_path / "redis").mkdir()
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = _make_run_environment(tmp_path, redis_server.url, port)
    running = _spawn_make_run(tmp_path, env)
    log = tmp_path / "make-run.log"
    traffic = None
    try:

        def answering() -> bool:
            try:
                return httpx.get(base + "/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert running.poll() is None, log.read_text()
                return False

        _wait_until(answering, 60, "make run to answer with a worker")
        issued = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from xumpweb.wiring.models import ApiToken\n"
             "print(ApiToken.issue('outage', {'*': ['publish', 'consume', 'manage']})[1])"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip().splitlines()[-1]
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                              timeout=10)  # fmt: skip
        assert client.post("/api/queues", json={"name": "orders"}).status_code == 201
        made = client.post(
            "/api/queues/orders/selectors",
            json={"when": "always", "action": "deliver", "target": "shipping", "enabled": True},
        )
        assert made.status_code == 201, made.text
        traffic = _Traffic(base, token, "orders", "shipping")
        traffic.start()
        for restart in range(3):
            before = len(traffic.accepted)
            _wait_until(lambda: len(traffic.accepted) >= before + 100, 40,  # noqa: B023
                        f"publishes to succeed before restart {restart + 1}")  # fmt: skip
            if restart == 1:
                redis_server.kill()  # kill -9 (the AOF is fsynced at every write)
            else:
                redis.Redis(port=redis_server.port).shutdown()  # as `redis-cli shutdown`
                redis_server.process.wait(timeout=10)
            refused = traffic.refused
            _wait_until(lambda: traffic.refused >= refused + 3, 20,  # noqa: B023
                        "publishes to be refused while Redis is down")  # fmt: skip
            redis_server.start()  # the same port and AOF file
        _wait_until(lambda: len(traffic.accepted) >= before + 200, 40, "publishes after")
        traffic.publishing.clear()
        accepted = set(traffic.accepted)

        def delivered() -> bool:
            return accepted <= {body for body, _ in traffic.received}

        _wait_until(delivered, 40, "every accepted publish to be delivered")
        # at-least-once: a body comes twice only as a redelivery (an ack lost with Redis)
        seen: set[str] = set()
        for body, redelivered in traffic.received:
            assert body not in seen or redelivered, f"{body} delivered twice, not redelivered"
            seen.add(body)
        redelivered = sum(again for _, again in traffic.received)
        print(
            f"\n{len(accepted)} publishes accepted (202), {traffic.refused} refused while "
            f"Redis was down, {len(traffic.received)} deliveries, {redelivered} redelivered"
        )
        text = log.read_text()
        assert "Unrecoverable error" not in text
        assert "keep_running:" not in text  # nothing had to be restarted
        assert running.poll() is None

        # the STOMP process rode the outages out too: a SEND is received and its receipt
        # comes once durable
        stomp_client = stomp.Connection12([("127.0.0.1", int(env["XUMP_STOMP_PORT"]))])
        receipts = _Receipts()
        stomp_client.set_listener("receipts", receipts)
        stomp_client.connect("make-run", token, wait=True)
        stomp_client.send("/queue/orders", "over STOMP", headers={"receipt": "after-outage"})
        _wait_until(lambda: "after-outage" in receipts.ids, 20, "the STOMP receipt")
        stomp_client.disconnect()

        # a process that dies anyway is started again; the others go on
        worker = _worker_pid(running.pid)
        os.kill(worker, signal.SIGKILL)
        _wait_until(lambda: "keep_running: 'celery' exited" in log.read_text(), 20,
                    "the worker to be restarted")  # fmt: skip
        _wait_until(lambda: _worker_pid(running.pid) not in (None, worker), 20, "a new worker")
        traffic.publishing.set()
        before = len(traffic.accepted)
        _wait_until(lambda: len(traffic.accepted) >= before + 50, 20, "publishes")
        traffic.publishing.clear()
        accepted = set(traffic.accepted)
        _wait_until(delivered, 40, "delivery through the new worker")
        assert running.poll() is None

        # /metrics sums every process's figures (run.sh shares PROMETHEUS_MULTIPROC_DIR):
        # the web process's publishes, and the router batches of both workers, the killed
        # one's included
        answer = client.get("/metrics")
        assert answer.status_code == 200, answer.text
        samples = [s for f in text_string_to_metric_families(answer.text) for s in f.samples]
        applied = sum(s.value for s in samples if s.name == "xump_router_batch_size_sum")
        published = sum(
            s.value
            for s in samples
            if s.name == "xump_http_requests_total"
            and s.labels["route"] == "api-publish"
            and s.labels["status"] == "202"
        )
        assert applied >= len(accepted) and published >= len(accepted)
        # ...and the STOMP process's (run.sh's PROMETHEUS_MULTIPROC_DIR reaches it too)
        assert any(s.name == "xump_stomp_actions_total" and s.value >= 1 for s in samples)
    finally:
        if traffic is not None:
            traffic.stop()
        os.killpg(running.pid, signal.SIGINT)  # Ctrl-C
        try:
            running.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
        redis_server.stop()
    assert _descendants(running.pid) == []  # Ctrl-C stopped every process
