#!/usr/bin/env bash
# First issue 45's measurement (benchmarks.floor): the exclusive lock beside a
# floor of the lock table's shape over 1,000 names, on a durable cluster of its
# own that preloads pg_stat_statements, with fast commits, 8-64 clients, SQLite
# and MariaDB. Then django-dlock beside the raw one-statement floor and other locks (advisory
# locks, django-db-mutex, redis-py, python-redis-lock), on a throwaway
# PostgreSQL cluster (fsync on, as in production), a SQLite file and a
# redis-server that the benchmark starts and stops itself; then the waiting
# figures, the lock kinds on PostgreSQL, SQLite and a throwaway MariaDB, MariaDB
# beside its floor, and (the full run, as root) three kinds of host: app
# processes in network namespaces, PgBouncer, a Patroni cluster.
#   scripts/benchmark.sh            # the full run (~50 min): docs/benchmark.{json,png}, docs/kinds.png,
#                                   # docs/capacity.png
#   scripts/benchmark.sh --quick    # for development: artifacts/benchmark-quick.*, artifacts/kinds-quick.png
#   BENCH_FEATURES=1 scripts/benchmark.sh   # also issue 36's features (benchmarks.features)
# Other arguments go to `python -m benchmarks` (--only, --delay-ms, --purge-rows, --purge-from);
# --quick and --json also to `python -m benchmarks.kinds`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
# shellcheck source=scripts/mariadb-server.sh
source scripts/mariadb-server.sh
mariadb_install # the server, and the headers mysqlclient builds against
dlock_venv -e ".[postgres,mysql]" --group benchmark
command -v redis-server >/dev/null || dlock_apt_install redis-server || {
    dlock_say "the Redis contenders need redis-server"
    exit 1
}
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
trap 'pg_cluster_stop; mariadb_stop' EXIT
floor_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
    --quick | --json=*) floor_args+=("${args[i]}") ;;
    --json) floor_args+=(--json "${args[i + 1]:-}") ;;
    esac
done
# Durable whatever BENCH_PG_OPTIONS says (issue 45 judges durable PostgreSQL; its fast-commit
# figures come from sessions with synchronous_commit off); pg_stat_statements for this part only,
# so that the other parts' statements run as before.
PG_CLUSTER_OPTIONS="-c shared_preload_libraries=pg_stat_statements" pg_cluster_start
mariadb_start
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.floor "${floor_args[@]}"
pg_cluster_stop
mariadb_stop
# fsync on, as in production; BENCH_PG_OPTIONS="-c fsync=off" when the disk is busy with
# other work and commits' flushes would hide everything else.
PG_CLUSTER_OPTIONS="${BENCH_PG_OPTIONS:- }" pg_cluster_start
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks "$@"
# Waiting (README "Waiting: how waiters are woken"): wake-up after a release, 8 blocking
# acquirers, the idle waiter's queries, 1,000 async waiters, 100 renewed locks, on both databases.
# The capacity of a Patroni cluster behind PgBouncer is `scripts/cluster.sh full`.
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.waiting
DATABASE_URL="sqlite:///$(mktemp -d)/bench-waiting.sqlite3" python -m benchmarks.waiting
# Issue 46's hot lock (docs/performance.md "A turn on a hot lock"): 8 blocking processes on one
# resource, PostgreSQL and SQLite beside advisory locks and Redis, side by side; its own JSON.
mkdir -p artifacts
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.hot_turns --json artifacts/hot-turns.json
# The lock kinds (docs/performance.md "Lock kinds"): their cycles beside the exclusive one and
# each database's floor, readers and a writer, a semaphore's crowd, a leader's hand-over.
kinds_args=()
quick=""
json=docs/benchmark.json
while (($#)); do
    case $1 in
    --quick) kinds_args+=(--quick) && quick=1 ;;
    --json) kinds_args+=(--json "$2") && json=$2 && shift ;;
    --json=*) kinds_args+=("$1") && json=${1#--json=} ;;
    esac
    shift
done
# Cheap commits (synchronous_commit off, as a fast disk or many clients sharing the
# server make them): the client's CPU decides; acquire + release beside the floor.
acquire_json=$json
[ -n "$quick" ] && [ "$json" = docs/benchmark.json ] && acquire_json=artifacts/benchmark-quick.json
PGOPTIONS="-c synchronous_commit=off" DATABASE_URL="$DLOCK_PG_URL" \
    python -m benchmarks.acquire --json "$acquire_json"
mariadb_start # exports DLOCK_MYSQL_URL, as pg_cluster_start DLOCK_PG_URL: benchmarks.kinds reads both
# One throttle use beside its one-upsert floor and Redis's limiters (issue 46; docs/throttles.md
# "What a use costs"): one client, 1,000 keys, on PostgreSQL (durable), SQLite and MariaDB, and a
# redis-server of its own; prints a table and writes nothing (about 4 minutes; --quick: 1).
python -m benchmarks.throttle ${quick:+--quick}
python -m benchmarks.kinds "${kinds_args[@]}"
# Issue 36's features (docs/performance.md "Throttles, lock-delay, priorities and the rest"):
# optional, BENCH_FEATURES=1; throttles beside Redis limiters (a redis-server of its own), the
# options of lock() beside plain lock(), on the same three databases; about 12 minutes (--quick: 2).
if [ -n "${BENCH_FEATURES:-}" ]; then
    python -m benchmarks.features "${kinds_args[@]}"
fi
# MariaDB's waiters (the head blocks at the holder's gate): their wake-up and 8 blocking acquirers; then acquire + release
# beside its raw floor through the same cursor, and 8 processes polling for one resource.
DATABASE_URL="$DLOCK_MYSQL_URL" BENCH_SECTIONS=wake,fair python -m benchmarks.waiting
# The hot lock on MariaDB beside GET_LOCK (issue 46): a table, no JSON.
DATABASE_URL="$DLOCK_MYSQL_URL" python -m benchmarks.hot_mariadb
DATABASE_URL="$DLOCK_MYSQL_URL" BENCH_PURGE_ROWS=${BENCH_PURGE_ROWS:-100000} python -m benchmarks.mariadb
# Three kinds of host (docs/scale.md "Capacity"): client processes in 4 network namespaces, through
# PgBouncer, to the leader of a Patroni cluster of three; the full run only, as root (namespaces).
if [ -n "$quick" ]; then
    dlock_say "capacity through PgBouncer and Patroni: not in the quick run"
elif [ "$(id -u)" != 0 ]; then
    dlock_say "capacity through PgBouncer and Patroni: skipped (network namespaces need root)"
else
    pg_cluster_stop
    mariadb_stop
    python -m tools.cluster.capacity --clients 8,32,64 --json "$json" --chart docs/capacity.png
fi
