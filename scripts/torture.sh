#!/usr/bin/env bash
# The torture run (README "Reliability"): worker processes take locks on a few
# resources while holders are killed and paused, backends terminated, the
# server restarted, clocks skewed and the database made read-only; a checker
# then verifies the history. Exit code 0 when no invariant was violated.
#
#   bash scripts/torture.sh                      # short profile, SQLite and PostgreSQL (< 2 min)
#   bash scripts/torture.sh --profile long       # on demand: 30 min per database, plus the
#                                                # durability comparison; prints the tables
#   bash scripts/torture.sh --database sqlite    # one database only
# Other arguments go to the runner (python -m tests.torture.runner --help), e.g. --seconds 600.
# PostgreSQL: uses DLOCK_PG_URL when set (restarts need PG_CLUSTER_DIR, which
# scripts/pg-cluster.sh exports), else starts a throwaway cluster with fsync on.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh

profile=short
databases=(sqlite postgresql)
runner_args=()
while (($#)); do
    case "$1" in
    --profile) profile=$2; shift 2 ;;
    --database) databases=("$2"); shift 2 ;;
    *) runner_args+=("$1"); shift ;;
    esac
done

dlock_venv -e ".[postgres]" --group test
# The clock-skew scenario runs processes under Debian's libfaketime; the PostgreSQL
# scenarios need its server binaries.
packages=()
command -v faketime >/dev/null || packages+=(faketime)
pg_cluster_bin >/dev/null 2>&1 || packages+=(postgresql)
if ((${#packages[@]})); then
    dlock_apt_install "${packages[@]}" || exit 1
fi

out=$(mktemp -d /tmp/dlock-torture.XXXXXX)
chmod 755 "$out"
status=0

for database in "${databases[@]}"; do
    echo "== torture ($profile) on $database"
    if [ "$database" = postgresql ] && [ -z "${DLOCK_PG_URL:-}" ]; then
        (
            PG_CLUSTER_OPTIONS="-c fsync=on"
            pg_cluster_start
            trap pg_cluster_stop EXIT
            python -m tests.torture.runner --database "$database" --profile "$profile" \
                --out "$out/$database" "${runner_args[@]}"
        ) || status=1
    else
        python -m tests.torture.runner --database "$database" --profile "$profile" \
            --out "$out/$database" "${runner_args[@]}" || status=1
    fi
done

# Durability, side by side: immediate restarts under load with PostgreSQL's
# defaults and with synchronous_commit off, on a cluster of its own with fsync on.
if [ "$profile" = long ] && [[ " ${databases[*]} " == *" postgresql "* ]]; then
    for setting in default synchronous_commit=off; do
        echo "== durability: $setting"
        (
            unset DLOCK_PG_URL PG_CLUSTER_DIR
            PG_CLUSTER_OPTIONS="-c fsync=on"
            pg_cluster_start
            trap pg_cluster_stop EXIT
            python -m tests.torture.runner --database postgresql --profile long \
                --durability "$setting" --seconds "${DLOCK_DURABILITY_SECONDS:-300}" \
                --out "$out/durability-$setting"
        ) || status=1
    done
fi
echo "torture.sh: histories in $out"
exit "$status"
