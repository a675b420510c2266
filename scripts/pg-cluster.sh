#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for the tests and benchmarks.
#   source scripts/pg-cluster.sh && pg_cluster_start   # exports DLOCK_PG_URL
#   pg_cluster_stop                                     # stops it and deletes its files
# PostgreSQL refuses to run as root, so as root the cluster runs as the postgres user.

pg_cluster_bin() {
    local dir
    for dir in "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")" \
        /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    echo "pg-cluster: no PostgreSQL server binaries (initdb, pg_ctl) found on PATH or in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)" >&2
    return 1
}

pg_cluster_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        su postgres -s /bin/sh -c "$*"
    else
        sh -c "$*"
    fi
}

pg_cluster_start() {
    local bin port
    bin=$(pg_cluster_bin) || return 1
    PG_CLUSTER_DIR=$(mktemp -d /tmp/dlock-pg.XXXXXX)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if [ "$(id -u)" = 0 ]; then
        # useradd lives in /usr/sbin, which a non-login PATH (/usr/bin:/bin) lacks.
        id postgres >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" useradd --system --no-create-home --shell /bin/sh postgres
        chown postgres "$PG_CLUSTER_DIR"
    fi
    pg_cluster_as_owner "'$bin/initdb' -D '$PG_CLUSTER_DIR/data' -U postgres -A trust -E UTF8 --locale=C.UTF-8 >'$PG_CLUSTER_DIR/initdb.log' 2>&1" || {
        cat "$PG_CLUSTER_DIR/initdb.log" >&2
        return 1
    }
    # fsync off: a throwaway cluster need not survive a power cut, and tests run faster.
    pg_cluster_as_owner "'$bin/pg_ctl' -D '$PG_CLUSTER_DIR/data' -l '$PG_CLUSTER_DIR/server.log' -w -t 60 \
        -o \"-c listen_addresses=127.0.0.1 -p $port -k '$PG_CLUSTER_DIR' -c max_connections=200 ${PG_CLUSTER_OPTIONS:--c fsync=off}\" start >/dev/null" || {
        cat "$PG_CLUSTER_DIR/server.log" >&2
        return 1
    }
    PG_CLUSTER_BIN=$bin
    export PG_CLUSTER_DIR PG_CLUSTER_BIN
    export DLOCK_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

pg_cluster_stop() {
    if [ -n "${PG_CLUSTER_DIR:-}" ] && [ -d "$PG_CLUSTER_DIR/data" ]; then
        pg_cluster_as_owner "'$PG_CLUSTER_BIN/pg_ctl' -D '$PG_CLUSTER_DIR/data' -m immediate -w stop >/dev/null 2>&1" || true
        rm -rf "$PG_CLUSTER_DIR"
    fi
    unset PG_CLUSTER_DIR
}
