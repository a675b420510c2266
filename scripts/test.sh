#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, starts a
# throwaway PostgreSQL cluster, lints, then runs every test on SQLite and on
# PostgreSQL. Arguments go to pytest (e.g. scripts/test.sh -k fencing).
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# The admin's browser test drives Debian's Chromium (Playwright downloads no browser).
command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq chromium fonts-dejavu-core >/dev/null)
# Redis for the Celery tests, which start a server of their own (skipped without it).
command -v redis-server >/dev/null ||
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) ||
    echo "test.sh: could not install redis-server; the Celery tests will be skipped" >&2

# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
trap pg_cluster_stop EXIT
pg_cluster_start

ruff check .
ruff format --check django_dlock tests
python manage.py makemigrations --check --dry-run
python manage.py check --fail-level WARNING

status=0
echo "== tests on SQLite"
python -m pytest "$@" || status=$?
echo "== tests on PostgreSQL"
DATABASE_URL="$DLOCK_PG_URL" python -m pytest "$@" || status=$?
exit "$status"
