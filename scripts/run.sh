#!/usr/bin/env bash
# `make run`: everything the service needs (database, static files, an admin login, Redis),
# then its processes (Procfile: web, worker, beat) under honcho until Ctrl-C. A redis-server
# this script started is stopped when it ends.
#
# Environment: ADDRESS (host:port, default 127.0.0.1:8000), VENV (default .venv), and the
# service's own settings (README: Configuration).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
ADDRESS=${ADDRESS:-127.0.0.1:8000}
case $VENV in /*) ;; *) VENV=$PWD/$VENV ;; esac
export PATH="$VENV/bin:$PATH"
export XUMP_HOST=${ADDRESS%:*} XUMP_PORT=${ADDRESS##*:}
mkdir -p var

# one secret key for every process and across restarts (sessions survive), kept out of git
if [ -z "${XUMP_SECRET_KEY:-}" ]; then
    if [ ! -s var/secret-key ]; then
        (umask 077 && python -c 'import secrets; print(secrets.token_urlsafe(50))' >var/secret-key)
    fi
    XUMP_SECRET_KEY=$(cat var/secret-key)
    export XUMP_SECRET_KEY
fi

# /metrics sums every process's figures from files here (docs/metrics.md); those of the
# processes of an earlier run are gone with them
export PROMETHEUS_MULTIPROC_DIR=${PROMETHEUS_MULTIPROC_DIR:-$PWD/var/metrics}
mkdir -p "$PROMETHEUS_MULTIPROC_DIR" && rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db

announcer=
cleanup() {
    [ -z "$announcer" ] || kill "$announcer" 2>/dev/null || true
    python scripts/ensure_redis.py stop
}
python scripts/ensure_redis.py start
trap cleanup EXIT

python manage.py migrate --noinput --verbosity 0
python manage.py collectstatic --noinput --verbosity 0
python manage.py ensure_admin

# say where the console is once it answers (honcho's output has scrolled on by then)
url="http://$ADDRESS/"
python - "$url" <<'PYTHON' &
import sys, time, urllib.error, urllib.request

url = sys.argv[1]
for _ in range(600):
    try:
        urllib.request.urlopen(url + "api/health", timeout=2)
    except urllib.error.HTTPError:
        pass  # it answers
    except OSError:
        time.sleep(0.2)
        continue
    print(f"\n    Xump console: {url}  (log in as shown above; Ctrl-C stops everything)\n",
          flush=True)
    break
PYTHON
announcer=$!

echo "Starting web, worker and beat (Procfile) on $url ..."
honcho start --no-colour
