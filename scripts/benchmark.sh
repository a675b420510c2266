#!/usr/bin/env bash
# Acquire + release throughput beside the raw-SQL floor, on a throwaway
# PostgreSQL cluster (default durability settings) and on a SQLite file.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv -e ".[postgres]" --group benchmark
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
trap pg_cluster_stop EXIT
PG_CLUSTER_OPTIONS=" " pg_cluster_start   # fsync on, as in production
echo "== PostgreSQL"
DATABASE_URL="$DLOCK_PG_URL" python -m benchmarks.acquire
echo "== SQLite"
DATABASE_URL="sqlite:///$(mktemp -d)/bench.sqlite3" python -m benchmarks.acquire
