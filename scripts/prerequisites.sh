#!/bin/sh
# Installs what pip cannot provide: a Java 17+ runtime for PySpark 4 and the JDBC drivers the
# Spark pipeline reads the reliability tables with (PostgreSQL, MariaDB/MySQL, SQLite).
#
# All of it comes from Debian packages (no Maven repository is needed). When everything is present
# the script only tests a few files and exits within milliseconds; it runs apt-get (once) only for
# what is missing. Set POCKETMQ_SKIP_PREREQUISITES=1 to skip it entirely (e.g. on a machine where
# you manage Java yourself and do not run the Spark tests).
set -eu

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

if [ -z "$missing" ]; then
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
echo "prerequisites: done" >&2
