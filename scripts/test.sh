#!/usr/bin/env bash
# shellcheck disable=SC2317 # the step_ functions are called by name
# Everything CI checks, from a fresh machine: makes the virtualenv .venv (any Python 3.11 or
# later), installs the project and its development tools into it, installs the Debian packages
# the tests drive when missing (PostgreSQL's server, Chromium, Redis), starts a throwaway
# PostgreSQL cluster, then runs the steps below and prints how each went.
# Arguments go to pytest (e.g. scripts/test.sh -x -k fencing), in the suites and the corners.
# DLOCK_STEPS="lint sqlite" runs only those steps; DLOCK_SKIP_BROWSER=1 skips the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
# shellcheck source=scripts/pg-cluster.sh
source scripts/pg-cluster.sh
# shellcheck source=scripts/mariadb-server.sh
source scripts/mariadb-server.sh

# -- the steps: each runs with `set -e`, and a failed one does not stop the next -----------------
# To add a step: write step_NAME and add NAME to STEPS.

step_lint() {
    ruff check .
    ruff format --check .
}

step_typing() {
    mypy
}

step_django() {
    python manage.py makemigrations --check --dry-run
    python manage.py check --fail-level WARNING
}

# The database suites run on pytest-xdist's workers, each on a test database of its own
# (DLOCK_PYTEST_WORKERS, default 2 for the two cores CI has; 0 runs them in one process).
parallel=(-n "${DLOCK_PYTEST_WORKERS:-2}" --dist loadfile)

step_sqlite() {
    env -u DATABASE_URL python -m pytest "${parallel[@]}" "$@"
}

# The other databases' steps leave out the tests marked vendor_independent (no database, or a
# SQLite file of their own): the SQLite step ran them.
step_postgres() {
    DATABASE_URL="$DLOCK_PG_URL" DLOCK_SKIP_VENDOR_INDEPENDENT=1 python -m pytest "${parallel[@]}" "$@"
}

step_mariadb() {
    DATABASE_URL="$DLOCK_MYSQL_URL" DLOCK_SKIP_VENDOR_INDEPENDENT=1 python -m pytest "${parallel[@]}" "$@"
}

step_portable() {
    # PostgreSQL's portable operations: with server-side binding the backend's one-statement
    # operations do not apply and the portable ones run, as with psycopg 2 (the nox session
    # portable-postgres is the same on another Python).
    DATABASE_URL="$DLOCK_PG_URL" DLOCK_PG_SERVER_SIDE_BINDING=1 DLOCK_SKIP_VENDOR_INDEPENDENT=1 \
        python -m pytest "${parallel[@]}" "$@"
}

step_torture() {
    # Faults, histories and a checker (README "Reliability"): the short profile on both databases.
    bash scripts/torture.sh --profile short
}

step_cluster() {
    # PgBouncer, one Patroni failover and a read replica, on a cluster the test starts (needs root
    # for the network namespaces; installs patroni, etcd, haproxy and pgbouncer when missing).
    DLOCK_CLUSTER=1 python -m pytest -p no:randomly tests/test_cluster.py
}

step_docs() {
    # The documentation site, strictly: a broken link or anchor, or a page outside the nav, fails
    # (mkdocs.yml's `validation:`). Then the same on a copy with a broken anchor planted, which
    # must fail, so that the check cannot be switched off unnoticed (`--quiet`, for one, hides
    # the warnings that --strict counts). Built in a temporary directory, deleted afterwards.
    dlock_venv --group docs
    work=$(mktemp -d) # not local: the EXIT trap of the step's subshell reads it
    trap 'rm -rf "$work"' EXIT
    export NO_MKDOCS_2_WARNING=1 # Material's notice about its successor, on every build
    mkdocs build --strict --site-dir "$work/site"
    cp -r docs mkdocs.yml README.md CHANGELOG.md "$work/"
    echo 'A [planted link](usage.md#no-such-anchor).' >>"$work/docs/index.md"
    if (cd "$work" && mkdocs build --strict --site-dir "$work/planted") >"$work/planted.log" 2>&1; then
        dlock_say "docs: the build passed with a broken anchor planted in index.md"
        return 1
    fi
    grep -q "no-such-anchor" "$work/planted.log" || {
        cat "$work/planted.log" >&2
        dlock_say "docs: the build with a planted broken anchor failed for another reason"
        return 1
    }
}

step_wheel() {
    # The sdist and the wheel build and pass twine; the wheel runs the example project.
    bash scripts/check-wheel.sh
}

step_base() {
    # Django alone, without DRF or Celery (nox makes the environment).
    nox -s base-3.11
}

step_corners() {
    # The matrix's oldest and newest pairs (Python 3.11 + Django 5.2, Python 3.13 + Django 6.1)
    # on the databases DLOCK_CORNER_DATABASES selects (default sqlite), less the pair that .venv
    # is, which the steps above ran on every database (Debian 12's Python 3.11 gets Django 5.2:
    # the oldest). Then the suite against Django's next version, which may fail without failing
    # the step and is skipped while PyPI has nothing newer than the newest pair's Django
    # (django-main). A Python this machine lacks is skipped (`nox -l` says which exist).
    local ran sessions
    ran=$(python -c 'import sys, django; print("%d.%d-django%d.%d" % (*sys.version_info[:2], *django.VERSION[:2]))')
    mapfile -t sessions < <(
        nox -l --json -t oldest newest -k "${DLOCK_CORNER_DATABASES:-sqlite}" 2>/dev/null |
            python -c 'import json, sys; sys.stdout.writelines(s["session"] + "\n" for s in json.load(sys.stdin) if f"({sys.argv[1]}-" not in s["session"])' "$ran"
    )
    dlock_say "corners: ${sessions[*]} (.venv is $ran: the steps above ran it)"
    if ((${#sessions[@]})); then
        PYTEST_ADDOPTS="${parallel[*]}" nox -s "${sessions[@]}" ${1+-- "$@"}
    fi
    PYTEST_ADDOPTS="${parallel[*]}" nox -s django-main ${1+-- "$@"}
}

STEPS=(lint typing django sqlite postgres mariadb portable torture cluster docs wheel base corners)

# -- setup ---------------------------------------------------------------------------------------

# MariaDB's server, and what mysqlclient builds against, before the venv installs it.
mariadb_install || dlock_say "could not install MariaDB: its suite fails"
dlock_venv "${DLOCK_VENV_ALL[@]}"

# Debian packages the tests drive: PostgreSQL's server binaries for the throwaway cluster,
# Chromium and a font for the admin's browser test (Playwright downloads no browser), Redis for
# the Celery tests (which start a server of their own).
packages=()
pg_cluster_bin >/dev/null 2>&1 || packages+=(postgresql)
if [ "${DLOCK_SKIP_BROWSER:-}" != 1 ] && ! command -v chromium >/dev/null; then
    packages+=(chromium fonts-dejavu-core)
fi
command -v redis-server >/dev/null || packages+=(redis-server)
# PgBouncer for the tests of waiting behind a transaction pooler.
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || packages+=(pgbouncer)
if ((${#packages[@]})); then
    dlock_apt_install "${packages[@]}" ||
        dlock_say "could not install ${packages[*]}: without PostgreSQL its suite fails, without" \
            "Chromium the browser test fails, without Redis the Celery tests are skipped"
fi

trap 'pg_cluster_stop; mariadb_stop' EXIT
pg_cluster_start
mariadb_start

# -- run -----------------------------------------------------------------------------------------

# "815 passed, 67 skipped" from the closing lines of every pytest run in a step's output, summed;
# for the torture, the databases run and the violations their tables count; else "-".
dlock_test_counts() {
    python3 - "$1" <<'PY'
import re
import sys
from collections import Counter

counts: Counter[str] = Counter()
closing = re.compile(r"^=* *((?:\d+ \w+(?:, )?)+) in [\d.]+s\b")
databases, violations = 0, 0
for line in open(sys.argv[1], errors="replace"):
    if match := closing.match(line.strip()):
        for number, word in re.findall(r"(\d+) (\w+)", match.group(1)):
            counts[{"error": "errors"}.get(word, word)] += int(number)
    elif line.startswith("== torture ("):
        databases += 1
    elif match := re.match(r"\| violations of .*\| *(\d+) *\|", line):
        violations += int(match.group(1))
order = ["passed", "failed", "errors", "skipped", "deselected", "xfailed", "xpassed"]
found = [f"{counts[word]} {word}" for word in order if counts[word]]
if databases:
    found.append(f"{databases} databases, {violations} violations")
print(", ".join(found) or "-")
PY
}

read -ra selected <<<"${DLOCK_STEPS:-${STEPS[*]}}"
logs=$(mktemp -d /tmp/dlock-test-logs.XXXXXX)
summary=()
failed=0
run_started=$SECONDS
for step in "${selected[@]}"; do
    echo "== $step"
    started=$SECONDS
    set +e
    (
        set -e
        "step_$step" "$@"
    ) 2>&1 | tee "$logs/$step.log"
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" = 0 ]; then outcome=ok; else outcome="FAILED ($status)" failed=1; fi
    summary+=("$(printf '%-10s %7ss  %-12s %s' "$step" $((SECONDS - started)) "$outcome" "$(dlock_test_counts "$logs/$step.log")")")
done

echo "== summary (each step's wall seconds, result and tests; logs in $logs)"
printf '  %-10s %8s  %-12s %s\n' step seconds result tests
printf '  %-10s %7ss  %s\n' setup "$run_started" "(packages, .venv, servers)"
printf '  %s\n' "${summary[@]}"
printf '  %-10s %7ss\n' total "$SECONDS"
exit "$failed"
