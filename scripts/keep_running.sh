#!/usr/bin/env bash
# keep_running.sh COMMAND [ARG...]: run COMMAND, and start it again whenever it exits on its
# own (a crash, a bug), so that one process of `make run` dying does not make honcho stop
# the others (honcho stops everything as soon as one of its processes ends).
#
# SIGTERM, SIGINT or SIGHUP (honcho sends SIGTERM to the process group on Ctrl-C) are passed
# on to COMMAND; once it has exited this script exits with its status, and starts nothing
# again. Restarts wait 1 s, doubling up to 30 s while the command keeps dying within 10 s
# of its start.
set -u

child=
stopping=0
stop() {
    stopping=1
    [ -z "$child" ] || kill -TERM "$child" 2>/dev/null
}
trap stop TERM INT HUP

delay=1
while :; do
    started=$SECONDS
    "$@" &
    child=$!
    # `wait` returns early when a trapped signal arrives: wait again until the child is gone
    while :; do
        wait "$child"
        status=$?
        kill -0 "$child" 2>/dev/null || break
    done
    child=
    [ "$stopping" = 0 ] || exit "$status"
    if [ $((SECONDS - started)) -ge 10 ]; then
        delay=1
    fi
    echo "keep_running: '$1' exited with status $status; starting it again in ${delay} s" >&2
    sleep "$delay" &
    wait $! 2>/dev/null
    [ "$stopping" = 0 ] || exit "$status"
    delay=$((delay * 2 > 30 ? 30 : delay * 2))
done
