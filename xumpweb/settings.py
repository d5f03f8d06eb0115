"""Settings, all read from the environment here and nowhere else (README: Configuration).

XUMP_SECRET_KEY      secret key; when unset, var/secret-key (written by `make run`), else a
                     random one per process (sessions do not survive a restart) and a
                     warning is printed
XUMP_DEBUG           "1" to turn Django's debug mode on (default off)
XUMP_ALLOWED_HOSTS   comma-separated host names (default "127.0.0.1,localhost")
DATABASE_URL         sqlite:///path or postgresql://user:pass@host:port/db
                     (default sqlite:///var/xump.sqlite3)
XUMP_REDIS_URL       the Redis server for messages, the Celery broker and the Channels layer
                     (default redis://127.0.0.1:6379/0); with XUMP_REDIS_CLUSTER, any node
                     of a Redis Cluster, for messages only
XUMP_REDIS_CLUSTER   "true" when XUMP_REDIS_URL is a Redis Cluster node (default false);
                     checked at start: every slot served, every node holding slots up
XUMP_BROKER_URL      Celery's broker: amqp://... (RabbitMQ) or a single Redis server,
                     redis://... or redis+socket:///path (default XUMP_REDIS_URL, a unix://
                     one as redis+socket://; required with XUMP_REDIS_CLUSTER)
XUMP_CHANNELS_URL    the Channels layer's Redis, a single server (default XUMP_REDIS_URL;
                     required with XUMP_REDIS_CLUSTER)
XUMP_STORE           name of the Redis store the service's queues live in (default "main")
XUMP_SHARDS          how many Redis stores (shards, SPEC §10) the queues are placed over
                     (default 1: the one store XUMP_STORE, its data as before)
XUMP_ROUTING         "worker" (default): Celery workers route; "inline": the web process
                     routes in a thread of its own (one process, the embedded case)
XUMP_MAX_BODY        largest message body the API, the WebSocket and STOMP accept, in bytes
                     (default 1 MiB); the router takes any body they took
XUMP_DIRECT_PUBLISH  "0" to send token publishes through Django's whole request handling
                     too (default on: api/direct.py answers them, the same way, faster)
XUMP_DELIVERY_TIMEOUT  seconds before an unconfirmed delivery is returned (default 60)
XUMP_LEASE_MS        how long a router's lease on the store lasts unless renewed (default 5000)
XUMP_CALL_TIMEOUT    seconds an API call waits for the router to answer (default 10)
XUMP_ARCHIVE_DIR     where the archive export writes Parquet and analytics runs their output
                     (default var/archive; a relative path is under the project directory)
XUMP_ARCHIVE_INTERVAL  seconds between archive exports run by Celery beat (default 300)
XUMP_JOURNAL_LIMIT   delivery-journal events kept in Redis until archived (default 2,000,000;
                     beyond it the oldest are dropped and the archive reports the gap)
XUMP_INBOX_LIMIT     commands the store's inbox may hold before publishes are refused with
                     503 inbox_full and Retry-After (default 1,000,000; a publish-batch is
                     one command; confirms and rejects are never refused)
XUMP_STOMP_PORT      the TCP port of the STOMP server process (`manage.py stomp_server`,
                     the Procfile's `stomp`; default 61613)
XUMP_STOMP_HOST      the address it listens on (default 127.0.0.1; 0.0.0.0 for every one)
XUMP_STOMP_ROUTES    "true": with worker routing and one shard, the STOMP server routes the
                     store while it runs, so its SENDs reach its subscribers in one durable
                     write (a lone message sooner; less throughput on few cores, see
                     docs/live-path.md); workers take routing over when it stops or dies.
                     Default "false": the workers route
XUMP_WEB_ROUTES      "true": the same for the web process (uvicorn, one process): its
                     JSON WebSocket, HTTP and STOMP-over-WebSocket publishes and acks are
                     routed where they arrive. Default "false"
XUMP_STOMP_PREFETCH  credit of a STOMP subscription that sends no prefetch-count (default 1000)
XUMP_STOMP_HEARTBEAT_MS  the heart-beat interval the STOMP server offers and asks, ms
                     (default 10000; 0 for none)
XUMP_STOMP_TOPIC_ROUTER  the queue STOMP /topic/ destinations publish to and subscribe on
                     (default "parrot", the parrot pattern's router)
XUMP_STOMP_CONNECT_WAIT  seconds a STOMP client has to complete its CONNECT frame before
                     it is closed with an ERROR (default 30)
XUMP_SPARK_MASTER    the Spark master URL the pipeline jobs use (default local[*])
XUMP_METRICS_ADDRESS  host:port where the web process serves /metrics open to anyone who
                     reaches it (default unset: /metrics on the web server, for a token
                     with the metrics right or an admin; docs/metrics.md)
PROMETHEUS_MULTIPROC_DIR  a directory every process of the host shares for its metrics
                     (`make run`: var/metrics, emptied at start); unset: each process's own
XUMP_LOGIN_FAILURES  failed logins for one user name from one address before that pair is
                     locked out (default 5; console and admin login alike)
XUMP_LOGIN_COOLOFF   minutes a lockout lasts (default 15)
XUMP_TRUSTED_PROXIES  addresses or networks of reverse proxies in front of the service,
                     comma-separated (default none): a login from one of them counts by the
                     address it forwards in X-Forwarded-For, not by the proxy's
XUMP_HTTPS           "1" when the service is reached over HTTPS: Secure session and CSRF
                     cookies, Strict-Transport-Security (default off)
XUMP_HSTS_SECONDS    Strict-Transport-Security max-age with XUMP_HTTPS (default 31536000)
XUMP_PROXY_SSL_HEADER  with XUMP_HTTPS behind a proxy that ends TLS: "1" to trust its
                     X-Forwarded-Proto: https header (default off)
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlparse

from xumpweb import redis_topology
from xumpweb.security import trusted_proxies

BASE_DIR = Path(__file__).resolve().parent.parent


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def database_from_url(url: str) -> dict:
    """Django DATABASES entry for a sqlite:/// or postgresql:// URL."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            path = path.lstrip("/")
        name = Path(path) if Path(path).is_absolute() else BASE_DIR / path
        # Several processes write the wiring (web, each shard's router, the STOMP server):
        # a transaction takes the write lock when it begins, so two never deadlock on
        # upgrading a read lock (SQLite answers that at once with "database is locked"
        # instead of waiting); WAL lets readers go on beside the one writer.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL",
            },
        }
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
        }
    raise ValueError(f"DATABASE_URL must start with sqlite:/// or postgresql://, not {url!r}")


DEBUG = _flag("XUMP_DEBUG")
SECRET_KEY = os.environ.get("XUMP_SECRET_KEY", "")
SECRET_KEY_FILE = BASE_DIR / "var" / "secret-key"  # made by `make run` (scripts/run.sh)
if not SECRET_KEY and SECRET_KEY_FILE.is_file():
    SECRET_KEY = SECRET_KEY_FILE.read_text().strip()
if not SECRET_KEY:
    SECRET_KEY = secrets.token_urlsafe(50)
    if "test" not in sys.argv[1:2]:
        print(
            "warning: XUMP_SECRET_KEY is not set; using a random key for this process",
            file=sys.stderr,
        )
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("XUMP_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if host.strip()
]


def _number(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        return float(value)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {value!r}") from None


def _choice(name: str, default: bool) -> bool:
    """A true/false setting that refuses anything else (a typo must not mean false)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"{name} must be true or false, not {os.environ[name]!r}")


def _positive(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"{name} must be a positive integer (1, 2, ...), not {value!r}")
    return int(value)


def _broker_of(url: str) -> str:
    """Celery's broker on XUMP_REDIS_URL's server: kombu names a unix socket
    redis+socket:///path, its database `virtual_host` (redis-py: unix:///path?db=N)."""
    if not url.startswith("unix://"):
        return url
    parsed = urlparse(url)
    options = dict(parse_qsl(parsed.query))
    credentials = parsed.netloc  # [user][:password]@, as given
    if "password" in options:  # redis-py's other form; kombu reads it from the netloc only
        user = quote(options.pop("username", parsed.username or ""), safe="")
        credentials = f"{user}:{quote(options.pop('password'), safe='')}@"
    options = {"virtual_host": options.pop("db", "0"), **options}  # the rest as they came
    return f"redis+socket://{credentials}{parsed.path}?{urlencode(options)}"


def _url(name: str, default: str, schemes: tuple[str, ...], what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.startswith(schemes):
        raise SystemExit(f"{name} must be {what}, not {value!r}")
    return value


XUMP_REDIS_URL = os.environ.get("XUMP_REDIS_URL", "redis://127.0.0.1:6379/0")
XUMP_REDIS_CLUSTER = _choice("XUMP_REDIS_CLUSTER", False)
XUMP_STORE = os.environ.get("XUMP_STORE", "main")
XUMP_SHARDS = _positive("XUMP_SHARDS", 1)
# Celery's broker and the Channels layer have no Redis Cluster mode (kombu's Redis transport
# cannot use one, celery/celery#2852; channels-redis spreads over plain servers instead)
_SEPARATE = (("XUMP_BROKER_URL", "Celery's broker"), ("XUMP_CHANNELS_URL", "the Channels layer"))
for _name, _what in _SEPARATE:
    if XUMP_REDIS_CLUSTER and not os.environ.get(_name, "").strip():
        raise SystemExit(
            f"XUMP_REDIS_CLUSTER=true: {_what} has no Redis Cluster mode; set {_name} to "
            + ("amqp://... (RabbitMQ) or " if _name == "XUMP_BROKER_URL" else "")
            + "a single Redis server's redis://... URL"
        )
_REDIS_BROKERS = ("redis://", "rediss://", "redis+socket://")
XUMP_BROKER_URL = _url(
    "XUMP_BROKER_URL", _broker_of(XUMP_REDIS_URL), (*_REDIS_BROKERS, "amqp://", "amqps://"),
    "an amqp:// (RabbitMQ), redis:// or redis+socket:// URL",
)  # fmt: skip
XUMP_CHANNELS_URL = _url(
    "XUMP_CHANNELS_URL", XUMP_REDIS_URL, ("redis://", "rediss://", "unix://"),
    "a redis:// URL of a single Redis server",
)  # fmt: skip
# what the URL reaches, once per process (redis_topology.py); the default URL is `make run`'s
# own redis-server (scripts/ensure_redis.py), never a cluster
if "XUMP_REDIS_URL" in os.environ or XUMP_REDIS_CLUSTER:
    _redis_problem = redis_topology.problem(XUMP_REDIS_URL, XUMP_REDIS_CLUSTER)
    if _redis_problem:
        raise SystemExit(_redis_problem)
XUMP_ROUTING = os.environ.get("XUMP_ROUTING", "worker").strip().lower()
if XUMP_ROUTING not in ("worker", "inline"):
    raise SystemExit(f"XUMP_ROUTING must be 'worker' or 'inline', not {XUMP_ROUTING!r}")
XUMP_MAX_BODY = int(_number("XUMP_MAX_BODY", 1024 * 1024))
XUMP_DIRECT_PUBLISH = _flag("XUMP_DIRECT_PUBLISH", True)
XUMP_DELIVERY_TIMEOUT = _number("XUMP_DELIVERY_TIMEOUT", 60.0)
XUMP_LEASE_MS = int(_number("XUMP_LEASE_MS", 5000))
XUMP_CALL_TIMEOUT = _number("XUMP_CALL_TIMEOUT", 10.0)
XUMP_ARCHIVE_DIR = BASE_DIR / os.environ.get("XUMP_ARCHIVE_DIR", "var/archive")
XUMP_ARCHIVE_INTERVAL = _number("XUMP_ARCHIVE_INTERVAL", 300.0)
XUMP_JOURNAL_LIMIT = int(_number("XUMP_JOURNAL_LIMIT", 2_000_000))
XUMP_INBOX_LIMIT = int(_number("XUMP_INBOX_LIMIT", 1_000_000))
XUMP_STOMP_PORT = int(_number("XUMP_STOMP_PORT", 61613))
# the STOMP server routes the store first while it runs (one shard, worker routing: SPEC
# §11's co-located path, xumpweb/router/watch.py); workers take over when it is gone. Off by
# default: on two cores it costs more throughput than it saves latency (docs/live-path.md)
XUMP_STOMP_ROUTES = _flag("XUMP_STOMP_ROUTES", False)
# the same for the web process (uvicorn): its JSON WebSocket, HTTP and STOMP-over-WebSocket
# publishes and acks are routed where they arrive
XUMP_WEB_ROUTES = _flag("XUMP_WEB_ROUTES", False)
XUMP_STOMP_HOST = os.environ.get("XUMP_STOMP_HOST", "127.0.0.1")
XUMP_STOMP_PREFETCH = int(_number("XUMP_STOMP_PREFETCH", 1000))
XUMP_STOMP_HEARTBEAT_MS = int(_number("XUMP_STOMP_HEARTBEAT_MS", 10_000))
XUMP_STOMP_TOPIC_ROUTER = os.environ.get("XUMP_STOMP_TOPIC_ROUTER", "parrot")
XUMP_STOMP_CONNECT_WAIT = _number("XUMP_STOMP_CONNECT_WAIT", 30.0)
XUMP_SPARK_MASTER = os.environ.get("XUMP_SPARK_MASTER", "local[*]")
XUMP_METRICS_ADDRESS = os.environ.get("XUMP_METRICS_ADDRESS", "").strip()
if XUMP_METRICS_ADDRESS and not XUMP_METRICS_ADDRESS.rpartition(":")[2].isdigit():
    raise SystemExit(f"XUMP_METRICS_ADDRESS must be host:port, not {XUMP_METRICS_ADDRESS!r}")
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # xumpweb/metrics.py: multiprocess mode
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# Celery: Redis broker (or RabbitMQ by XUMP_BROKER_URL); tasks are acknowledged after they
# ran, so a killed worker's task is run again (every task is idempotent)
CELERY_BROKER_URL = XUMP_BROKER_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis may be away for any length of time: keep trying (the default gives up after 100
# tries), through kombu's Redis transport with a fix for losing Redis mid-task (broker.py)
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
if XUMP_BROKER_URL.startswith(_REDIS_BROKERS):
    CELERY_BROKER_TRANSPORT = "xumpweb.broker:Transport"
CELERY_TASK_IGNORE_RESULT = True

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [XUMP_CHANNELS_URL], "prefix": "xump-asgi"},
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # Swagger UI for /api/docs from our own /static/, not a CDN (CSP, offline)
    "axes",
    "xumpweb.wiring",
    "xumpweb.router",
    "xumpweb.api",
    "xumpweb.live",
    "xumpweb.console",
    "xumpweb.analytics",
    "xumpweb.stompgate",
]

MIDDLEWARE = [
    # every answer under /api/ in JSON, a bad Host's included (api/middleware.py)
    "xumpweb.api.middleware.ApiJsonMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy: the console's own scripts only (xumpweb/security.py)
    "xumpweb.security.ContentSecurityPolicyMiddleware",
    # /static/ under uvicorn without DEBUG (see WHITENOISE_USE_FINDERS)
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # login rate limiting: last, so it sees the login views' answers (django-axes)
    "axes.middleware.AxesMiddleware",
    # a 503 page while Redis is away (console/unavailable.py)
    "xumpweb.console.unavailable.StoreUnavailableMiddleware",
]

ROOT_URLCONF = "xumpweb.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["xumpweb.access_tags"],  # {% can %}: what the role allows
        },
    },
]
WSGI_APPLICATION = "xumpweb.wsgi.application"
ASGI_APPLICATION = "xumpweb.asgi.application"

DATABASES = {
    "default": database_from_url(os.environ.get("DATABASE_URL", "sqlite:///var/xump.sqlite3"))
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"

# Login rate limiting (django-axes): after XUMP_LOGIN_FAILURES failed logins for one user
# name from one address, that pair is refused for XUMP_LOGIN_COOLOFF minutes with
# templates/console/locked_out.html (429). A successful login clears that user's failures.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(_number("XUMP_LOGIN_FAILURES", 5))
AXES_COOLOFF_TIME = _number("XUMP_LOGIN_COOLOFF", 15.0) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "console/locked_out.html"
AXES_VERBOSE = False
# behind a reverse proxy every login would come from its address: axes asks
# security.client_address, which reads X-Forwarded-For only from XUMP_TRUSTED_PROXIES
XUMP_TRUSTED_PROXIES = trusted_proxies(os.environ.get("XUMP_TRUSTED_PROXIES", ""))
AXES_CLIENT_IP_CALLABLE = "xumpweb.security.client_address"

# HTTPS (XUMP_HTTPS=1): cookies only over TLS, and HSTS on every HTTPS answer (Django sends
# it on secure requests only: behind a proxy that ends TLS, set XUMP_PROXY_SSL_HEADER too)
XUMP_HTTPS = _flag("XUMP_HTTPS")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = XUMP_HTTPS
SECURE_HSTS_SECONDS = int(_number("XUMP_HSTS_SECONDS", 31_536_000)) if XUMP_HTTPS else 0
if XUMP_HTTPS and _flag("XUMP_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "static"
# WhiteNoise serves static files straight from the apps and static/ too, so a server
# works (tests included) without `collectstatic`; `make run` still collects into STATIC_ROOT
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# a batch publish may carry many bodies of up to XUMP_MAX_BODY each; the API checks sizes
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"xump": {"level": "INFO"}},
}
