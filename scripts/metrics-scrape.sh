#!/usr/bin/env bash
# The example project's /metrics after a short load (example_project/metrics_load.py), on a fresh
# SQLite database; prints django-dlock's metrics (dlock_*), as docs/observability.md shows them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv -e ".[api,prometheus]" --group example

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DATABASE_URL="sqlite:///$work/db.sqlite3"
# Without prometheus_client's *_created series (a timestamp per series), as many projects run it.
export PROMETHEUS_DISABLE_CREATED_SERIES=True
python manage.py migrate --no-input --verbosity 0
python -m example_project.metrics_load | grep -E '^(# (HELP|TYPE) )?dlock_'
