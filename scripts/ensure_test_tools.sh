#!/usr/bin/env bash
# `make test`'s system tools: redis-server (the tests start private servers), Java 17 (Spark)
# and Debian's Chromium (browser tests). Installed with apt when missing and we may (root);
# otherwise the apt command to run is printed and the script fails.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing ${missing[*]} with apt-get ..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
    echo "make test needs: ${missing[*]}. Install them with:" >&2
    echo "    sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
