#!/usr/bin/env bash
# Serves the documentation site (mkdocs.yml, docs/) at http://127.0.0.1:8001/, rebuilding it as
# pages change; installs MkDocs and its theme (the `docs` group) into .venv the first time.
# Another address as the first argument: bash scripts/docs.sh 0.0.0.0:8001
# scripts/test.sh's `docs` step builds the same site with --strict.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
dlock_venv --group docs
export NO_MKDOCS_2_WARNING=1 # Material's notice about its successor, on every build
exec mkdocs serve --dev-addr "${1:-127.0.0.1:8001}"
