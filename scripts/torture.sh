#!/usr/bin/env bash
# The torture run (docs/reliability.md): worker processes take locks of every
# kind (exclusive, shared, reentrant, semaphore permits, several at once,
# leaders) on a few resources while holders are killed and paused, sessions
# terminated, the server restarted, clocks skewed and the database made
# read-only; a checker then verifies the history. Exit code 0 when no
# invariant was violated.
#
#   bash scripts/torture.sh                      # short profile, SQLite, PostgreSQL and MariaDB
#   bash scripts/torture.sh --profile long       # on demand: 30 min per database, plus the
#                                                # durability comparison; prints the tables
#   bash scripts/torture.sh --database sqlite    # one database only (sqlite, postgresql, mariadb)
# Other arguments go to the runner (python -m tools.torture.runner --help), e.g. --seconds 600.
# PostgreSQL: uses DLOCK_PG_URL when set (restarts need PG_CLUSTER_DIR, which
# scripts/pg-cluster.sh exports), else starts a throwaway cluster with fsync on.
# MariaDB: always a throwaway server of its own (scripts/mariadb-server.sh), which
# the run restarts and makes read-only, and nobody else uses.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
# shellcheck source=scripts/mariadb-server.sh
source scripts/mariadb-server.sh

profile=short
databases=(sqlite postgresql mariadb)
runner_args=()
while (($#)); do
    case "$1" in
    --profile) profile=$2; shift 2 ;;
    --database) databases=("$2"); shift 2 ;;
    *) runner_args+=("$1"); shift ;;
    esac
done

if [[ " ${databases[*]} " == *" mariadb "* ]]; then
    # The server, and what mysqlclient builds against, before the venv installs it.
    mariadb_install || exit 1
fi
dlock_venv -e ".[postgres,mysql]" --group test
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
    if [ "$database" = mariadb ]; then
        (
            unset DLOCK_MYSQL_URL MARIADB_DIR MARIADB_PID
            mariadb_start
            # The run restarts the server: stop the one its pid file names.
            trap 'MARIADB_PID=$(cat "$MARIADB_DIR/mysqld.pid" 2>/dev/null || echo "$MARIADB_PID"); mariadb_stop' EXIT
            python -m tools.torture.runner --database "$database" --profile "$profile" \
                --out "$out/$database" "${runner_args[@]}"
        ) || status=1
    elif [ "$database" = postgresql ] && [ -z "${DLOCK_PG_URL:-}" ]; then
        (
            PG_CLUSTER_OPTIONS="-c fsync=on"
            pg_cluster_start
            trap pg_cluster_stop EXIT
            python -m tools.torture.runner --database "$database" --profile "$profile" \
                --out "$out/$database" "${runner_args[@]}"
        ) || status=1
    else
        python -m tools.torture.runner --database "$database" --profile "$profile" \
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
            python -m tools.torture.runner --database postgresql --profile long \
                --durability "$setting" --seconds "${DLOCK_DURABILITY_SECONDS:-300}" \
                --out "$out/durability-$setting"
        ) || status=1
    done
fi
echo "torture.sh: histories in $out"
exit "$status"
