#!/usr/bin/env bash
# Installs the Debian packages headrace's tests use when they are missing (kcat, postgresql,
# mariadb-server, chromium),
# and checks Java.
set -euo pipefail

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# PostgreSQL's server binaries (initdb, pg_ctl): the CDC tests start throwaway clusters
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    missing+=(postgresql)
fi
# MariaDB's server (mariadb-install-db, mariadbd): the MySQL CDC tests start throwaway servers
command -v mariadb-install-db >/dev/null 2>&1 || missing+=(mariadb-server)
# Chromium and its WebDriver: the console's browser tests drive a real headless Chromium
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]} ..."
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/dev/null || true
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v java >/dev/null 2>&1; then
    echo "error: Java 17+ is required (for Spark) but 'java' is not on PATH" >&2
    exit 1
fi
java_major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    echo "error: Java 17+ is required (for Spark); found: $(java -version 2>&1 | head -1)" >&2
    exit 1
fi
