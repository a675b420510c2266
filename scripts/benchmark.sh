#!/usr/bin/env bash
# django-dlock beside the raw one-statement floor and other locks (advisory
# locks, django-db-mutex, redis-py, python-redis-lock), on a throwaway
# PostgreSQL cluster (fsync on, as in production), a SQLite file and a
# redis-server that the benchmark starts and stops itself.
#   scripts/benchmark.sh            # the full run (~15 min): docs/benchmark.{json,png}
#   scripts/benchmark.sh --quick    # for development: artifacts/benchmark-quick.*
# Other arguments go to `python -m benchmarks` (--only, --delay-ms, --purge-rows, --purge-from).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv -e ".[postgres]" --group benchmark
command -v redis-server >/dev/null || dlock_apt_install redis-server || {
    dlock_say "the Redis contenders need redis-server"
    exit 1
}
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
trap pg_cluster_stop EXIT
# fsync on, as in production; BENCH_PG_OPTIONS="-c fsync=off" when the disk is busy with
# other work and commits' flushes would hide everything else.
PG_CLUSTER_OPTIONS="${BENCH_PG_OPTIONS:- }" pg_cluster_start
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks "$@"
# Waiting (README "Waiting: how waiters are woken"): wake-up after a release, 8 blocking
# acquirers, the idle waiter's queries, 1,000 async waiters, 100 renewed locks, on both databases.
# The capacity of a Patroni cluster behind PgBouncer is `scripts/cluster.sh full`.
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.waiting
DATABASE_URL="sqlite:///$(mktemp -d)/bench-waiting.sqlite3" python -m benchmarks.waiting
