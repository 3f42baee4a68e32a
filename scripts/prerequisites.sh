#!/bin/sh
# Installs what pip cannot provide: a Java 17+ runtime for PySpark 4, the JDBC drivers the
# Spark pipeline reads the reliability tables with (PostgreSQL, MariaDB/MySQL, SQLite), etcd for
# the automatic-failover tests, Chromium and ChromeDriver for the dashboard's browser test,
# Apache RocketMQ's official Node.js client for the gRPC compatibility tests (tests/grpc/node), and
# ali-ons, a pure JavaScript client of RocketMQ's remoting protocol (tests/remoting/node).
#
# Java, the drivers and (when missing) Node.js come from Debian packages (no Maven repository is
# needed); the two Node.js clients come from npm, each pinned by its package-lock.json. When
# everything is present the script only tests a few files and exits within milliseconds; it runs
# apt-get (once) and `npm ci` only for what is missing or out of date. Set
# POCKETMQ_SKIP_PREREQUISITES=1 to skip it entirely (e.g. on a machine where you manage Java and
# Node.js yourself and do not run the Spark or Node.js tests).
set -eu

tests_dir="$(dirname "$0")/../tests"

if [ "${POCKETMQ_SKIP_PREREQUISITES:-}" = "1" ]; then
    exit 0
fi

missing=""

# Java: PySpark 4 needs Java 17 or newer. Accept any java on PATH or JAVA_HOME reporting >= 17.
java_ok() {
    java_bin="java"
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
        java_bin="$JAVA_HOME/bin/java"
    fi
    command -v "$java_bin" >/dev/null 2>&1 || return 1
    major=$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1)
    [ -n "$major" ] && [ "$major" -ge 17 ]
}
if ! java_ok; then
    missing="$missing openjdk-17-jre-headless"
fi

# JDBC drivers: the jar each Debian package installs.
[ -f /usr/share/java/postgresql.jar ] || missing="$missing libpostgresql-jdbc-java"
[ -f /usr/share/java/mariadb-java-client.jar ] || missing="$missing libmariadb-java"
if [ ! -f /usr/share/java/sqlite-jdbc.jar ]; then
    missing="$missing libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni"
fi

# etcd for the automatic-failover tests (tests/replication/test_controller.py): Debian's server
# package; it is started by the tests, never as a system service.
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"

# Chromium and its WebDriver for the dashboard's browser tests (tests/dashboard/test_browser.py),
# from Debian; driven headless by Selenium, never started as a service.
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"

# Node.js 18+ and npm for the official Node.js client (Debian's nodejs is recent enough).
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"

# A Node.js client, installed from its project's lock file into its node_modules. npm writes
# node_modules/.package-lock.json on every install: newer than the lock file means up to date.
# $1: the npm project (a directory under tests/), $2: the package that must be there afterwards.
install_node_project() {
    project="$tests_dir/$1"
    if [ -f "$project/node_modules/.package-lock.json" ] \
        && [ "$project/node_modules/.package-lock.json" -nt "$project/package-lock.json" ] \
        && [ -f "$project/node_modules/$2/package.json" ]; then
        return 0
    fi
    echo "prerequisites: installing $2 (npm ci in tests/$1)" >&2
    if ! (cd "$project" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
        # as the tests do: a failure under CI, a warning (and skipped Node.js tests) elsewhere
        echo "prerequisites: npm ci failed in tests/$1; the tests using $2 cannot run" >&2
        [ -z "${CI:-}" ] || exit 1
    fi
}

install_node_clients() {
    install_node_project grpc/node rocketmq-client-nodejs
    install_node_project remoting/node ali-ons
}

if [ -z "$missing" ]; then
    install_node_clients
    exit 0
fi

echo "prerequisites: installing$missing" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "prerequisites: apt-get not found; install these yourself:$missing" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "prerequisites: not root and no sudo; install these yourself:$missing" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
# Try without refreshing the package lists first (fast when they are recent), then refresh once.
# shellcheck disable=SC2086
if ! $sudo apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1; then
    $sudo apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    $sudo apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
install_node_clients
echo "prerequisites: done" >&2
