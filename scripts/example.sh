#!/usr/bin/env bash
# Runs the example project on SQLite from a fresh machine: makes the virtualenv .venv (with
# any Python 3.11 or later; Debian's python3-venv is installed when missing), installs the
# project with its API and Prometheus metrics into it, migrates, makes a demo staff user
# (admin / admin) the first time, and serves on 127.0.0.1:8000 (or the address given as the
# first argument).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv -e ".[api,prometheus]" --group example

python manage.py migrate --no-input
python manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
    print('Created the demo superuser admin (password: admin).')
"
exec python manage.py runserver "${1:-127.0.0.1:8000}"
