#!/usr/bin/env bash
# Runs the example project on SQLite from a fresh machine: installs it, migrates,
# makes a demo staff user (admin / admin) the first time, serves on 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[example]"
"$PYTHON" manage.py migrate --no-input
"$PYTHON" manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
    print('Created the demo superuser admin (password: admin).')
"
exec "$PYTHON" manage.py runserver "${1:-127.0.0.1:8000}"
