#!/usr/bin/env bash
# Builds the sdist and the wheel into dist/, checks them (twine --strict, which renders the README
# as PyPI will; what the wheel holds; the project's URLs in its metadata), then
# installs the wheel with its [api] and [prometheus] extras into a new virtualenv and runs a copy
# of the example project outside the source tree, so that what runs is the installed package:
# migrate, check, and two requests to its server (the admin's login page and the OpenAPI schema).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv --group release

rm -rf dist
python -m build --outdir dist . >/dev/null
twine check --strict dist/*
wheel=$(echo dist/django_dlock-*.whl)

# The wheel holds the package with its templates, migrations and py.typed, and nothing else.
python - "$wheel" <<'PY'
import sys
import zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")})
assert tops == ["django_dlock"], f"the wheel holds {tops}, not only django_dlock"
for wanted in ("django_dlock/py.typed", "django_dlock/migrations/0001_initial.py"):
    assert wanted in names, f"the wheel lacks {wanted}"
assert any(n.startswith("django_dlock/templates/") for n in names), "the wheel lacks the templates"
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel lacks LICENSE"
# The PyPI page: the README as its description (no relative links: tests/test_docs.py), and the
# links PyPI shows beside it.
[metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
text = zipfile.ZipFile(sys.argv[1]).read(metadata).decode()
assert "Description-Content-Type: text/markdown" in text, "the description is not Markdown"
for label in ("Homepage", "Documentation", "Source", "Changelog", "Issues"):
    assert f"Project-URL: {label}, https://" in text, f"the metadata lacks the {label} URL"
print(f"{sys.argv[1]}: {len(names)} files, only django_dlock")
PY

work=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wheel}[api,prometheus]" "dj-database-url>=2.1"
cp -r example_project manage.py "$work/"
cd "$work"
venv/bin/python -c 'import django_dlock, sys; assert django_dlock.__file__.startswith(sys.prefix), django_dlock.__file__'
venv/bin/python manage.py migrate --no-input --verbosity 0
venv/bin/python manage.py check --fail-level WARNING

port=$(venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
venv/bin/python manage.py runserver --noreload "127.0.0.1:$port" >server.log 2>&1 &
server=$!
for _ in $(seq 100); do
    venv/bin/python -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=1)" 2>/dev/null && break
    sleep 0.1
done
for page in /admin/login/ /api/schema/; do
    status=$(venv/bin/python -c "
import sys, urllib.request
with urllib.request.urlopen('http://127.0.0.1:$port$page', timeout=10) as response:
    body = response.read().decode()
    print(response.status, len(body))
    sys.exit(0 if response.status == 200 else 1)
") || { cat server.log >&2; exit 1; }
    echo "GET $page: $status"
done
echo "check-wheel: the wheel installs with [api] and serves the example project"
