#!/usr/bin/env bash
# A throwaway MariaDB server on loopback, for the tests and benchmarks.
#   source scripts/mariadb-server.sh && mariadb_start   # exports DLOCK_MYSQL_URL
#   mariadb_stop                                         # stops it and deletes its files
# Installs Debian's mariadb-server (and what building mysqlclient needs) when
# missing. The server keeps everything in a temporary directory, listens on
# 127.0.0.1 at a free port and on a socket of its own, and runs as the mysql
# user when started as root. Its clock runs in a non-UTC time zone
# (MARIADB_TIME_ZONE, default +05:30), so that the tests catch any SQL that
# reads the session clock instead of UTC.

mariadb_install() {
    local packages=()
    command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || packages+=(mariadb-server)
    command -v mariadb_config >/dev/null 2>&1 || command -v mysql_config >/dev/null 2>&1 ||
        packages+=(default-libmysqlclient-dev)
    command -v pkg-config >/dev/null 2>&1 || packages+=(pkg-config)
    command -v cc >/dev/null 2>&1 || packages+=(build-essential)
    if ((${#packages[@]})); then
        if declare -F dlock_apt_install >/dev/null; then
            # scripts/venv.sh's installer: also through sudo, and says what it does.
            dlock_apt_install "${packages[@]}" || return 1
        else
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends "${packages[@]}" >/dev/null) || {
                echo "mariadb-server: could not install ${packages[*]}" >&2
                return 1
            }
        fi
    fi
    # Debian's package starts its own server: the tests use their own, so stop that one.
    if [ -d /run/systemd/system ]; then
        systemctl disable --now mariadb >/dev/null 2>&1 || true
    fi
}

mariadb_bin() {
    local name=$1 dir
    for dir in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin; do
        if [ -x "$dir/$name" ]; then
            echo "$dir/$name"
            return 0
        fi
    done
    echo "mariadb-server: $name not found" >&2
    return 1
}

mariadb_start() {
    local server install_db client port user=() options=() tries=0
    # MARIADB_OPTIONS: more server options, e.g. "--innodb-lock-wait-timeout=5".
    read -ra options <<<"${MARIADB_OPTIONS:-}"
    mariadb_install || return 1
    server=$(mariadb_bin mariadbd) || return 1
    install_db=$(mariadb_bin mariadb-install-db) || return 1
    client=$(mariadb_bin mariadb) || return 1
    MARIADB_DIR=$(mktemp -d /tmp/dlock-mariadb.XXXXXX)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if [ "$(id -u)" = 0 ]; then
        # mariadbd refuses to run as root unless told to: it runs as mysql.
        id mysql >/dev/null 2>&1 || useradd --system --no-create-home --shell /bin/false mysql
        chown mysql "$MARIADB_DIR"
        chmod 755 "$MARIADB_DIR"
        user=(--user=mysql)
    fi
    "$install_db" --no-defaults "${user[@]}" --datadir="$MARIADB_DIR/data" \
        --auth-root-authentication-method=socket --skip-test-db \
        >"$MARIADB_DIR/install.log" 2>&1 || {
        cat "$MARIADB_DIR/install.log" >&2
        return 1
    }
    # --no-defaults: nothing from /etc/mysql. Durability is relaxed (a throwaway
    # server need not survive a power cut); the isolation level and the
    # case-insensitive default collation stay as on a stock server, since the
    # lock SQL must work with them.
    "$server" --no-defaults "${user[@]}" --datadir="$MARIADB_DIR/data" \
        --bind-address=127.0.0.1 --port="$port" --socket="$MARIADB_DIR/mysqld.sock" \
        --pid-file="$MARIADB_DIR/mysqld.pid" --log-error="$MARIADB_DIR/server.log" \
        --character-set-server=utf8mb4 --max-connections=300 \
        --default-time-zone="${MARIADB_TIME_ZONE:-+05:30}" \
        --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 --skip-name-resolve \
        "${options[@]}" >/dev/null 2>&1 &
    MARIADB_PID=$!
    export MARIADB_DIR MARIADB_PID
    until "$client" --no-defaults --socket="$MARIADB_DIR/mysqld.sock" -uroot -e 'SELECT 1' >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge 600 ] || ! kill -0 "$MARIADB_PID" 2>/dev/null; then
            echo "mariadb-server: the server did not start" >&2
            cat "$MARIADB_DIR/server.log" >&2
            mariadb_stop
            return 1
        fi
        sleep 0.1
    done
    # The tests connect as dlock over TCP; Django's test runner creates (and
    # drops) test_dlock, so the user has rights on every database.
    "$client" --no-defaults --socket="$MARIADB_DIR/mysqld.sock" -uroot -e "
        CREATE DATABASE dlock CHARACTER SET utf8mb4;
        CREATE USER 'dlock'@'127.0.0.1' IDENTIFIED BY 'dlock';
        GRANT ALL PRIVILEGES ON *.* TO 'dlock'@'127.0.0.1';" || {
        mariadb_stop
        return 1
    }
    export DLOCK_MYSQL_URL="mysql://dlock:dlock@127.0.0.1:$port/dlock"
}

mariadb_stop() {
    if [ -n "${MARIADB_PID:-}" ]; then
        # TERM shuts down cleanly; KILL if that takes more than 30 s.
        kill "$MARIADB_PID" 2>/dev/null || true
        local tries=0
        while kill -0 "$MARIADB_PID" 2>/dev/null && [ "$tries" -lt 300 ]; do
            sleep 0.1
            tries=$((tries + 1))
        done
        kill -9 "$MARIADB_PID" 2>/dev/null || true
        wait "$MARIADB_PID" 2>/dev/null || true
    fi
    if [ -n "${MARIADB_DIR:-}" ] && [ -d "$MARIADB_DIR" ]; then
        rm -rf "$MARIADB_DIR"
    fi
    unset MARIADB_DIR MARIADB_PID
}
