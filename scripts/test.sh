#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, starts a
# throwaway PostgreSQL cluster, lints, then runs every test on SQLite and on
# PostgreSQL. Arguments go to pytest (e.g. scripts/test.sh -k fencing).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}

"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]"

# Debian packages the tests drive: Chromium for the admin's browser test
# (Playwright downloads no browser), Redis for the Celery tests (which start a
# server of their own).
packages=()
if [ "${DLOCK_SKIP_BROWSER:-}" != 1 ] && ! command -v chromium >/dev/null; then
    packages+=(chromium fonts-dejavu-core)
fi
command -v redis-server >/dev/null || packages+=(redis-server)
if ((${#packages[@]})); then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null) ||
        echo "test.sh: could not install ${packages[*]}: the browser test fails and the Celery tests are skipped without them" >&2
fi

# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
trap pg_cluster_stop EXIT
pg_cluster_start

"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check django_dlock tests
"$PYTHON" manage.py makemigrations --check --dry-run
"$PYTHON" manage.py check --fail-level WARNING

status=0
echo "== tests on SQLite"
"$PYTHON" -m pytest "$@" || status=$?
echo "== tests on PostgreSQL"
DATABASE_URL="$DLOCK_PG_URL" "$PYTHON" -m pytest "$@" || status=$?
exit "$status"
