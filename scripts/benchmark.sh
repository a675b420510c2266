#!/usr/bin/env bash
# django-dlock beside the raw one-statement floor and other locks (advisory
# locks, django-db-mutex, redis-py, python-redis-lock), on a throwaway
# PostgreSQL cluster (fsync on, as in production), a SQLite file and a
# redis-server that the benchmark starts and stops itself; then the waiting
# figures, and the lock kinds on PostgreSQL, SQLite and a throwaway MariaDB.
#   scripts/benchmark.sh            # the full run (~25 min): docs/benchmark.{json,png}, docs/kinds.png
#   scripts/benchmark.sh --quick    # for development: artifacts/benchmark-quick.*, artifacts/kinds-quick.png
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
# fsync on, as in production; BENCH_PG_OPTIONS="-c fsync=off" when the disk is busy with
# other work and commits' flushes would hide everything else.
PG_CLUSTER_OPTIONS="${BENCH_PG_OPTIONS:- }" pg_cluster_start
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks "$@"
# Waiting (README "Waiting: how waiters are woken"): wake-up after a release, 8 blocking
# acquirers, the idle waiter's queries, 1,000 async waiters, 100 renewed locks, on both databases.
# The capacity of a Patroni cluster behind PgBouncer is `scripts/cluster.sh full`.
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.waiting
DATABASE_URL="sqlite:///$(mktemp -d)/bench-waiting.sqlite3" python -m benchmarks.waiting
# The lock kinds (docs/performance.md "Lock kinds"): their cycles beside the exclusive one and
# each database's floor, readers and a writer, a semaphore's crowd, a leader's hand-over.
kinds_args=()
while (($#)); do
    case $1 in
    --quick) kinds_args+=(--quick) ;;
    --json) kinds_args+=(--json "$2") && shift ;;
    --json=*) kinds_args+=("$1") ;;
    esac
    shift
done
mariadb_start # exports DLOCK_MYSQL_URL, as pg_cluster_start DLOCK_PG_URL: benchmarks.kinds reads both
python -m benchmarks.kinds "${kinds_args[@]}"
