"""A short load on the example project's locks, then its /metrics page:
``python -m example_project.metrics_load`` (``scripts/metrics-scrape.sh`` runs it
on a fresh database). The scrape in docs/observability.md is its output.

Threads of one process, as in a threaded web server: the counters and
histograms are this process's; the holders and waiters gauges are read from
the database when /metrics is served.
"""

from __future__ import annotations

import os
import random
import threading
import time


def main(seconds: float = 3.0) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    from django_dlock import LockExpired, LockNotAcquired, lock

    end = time.monotonic() + seconds

    def report_writer() -> None:
        # Four writers take turns on one report: they wait, and now and then give up.
        while time.monotonic() < end:
            try:
                with lock("report:daily", ttl=10, timeout=0.2):
                    time.sleep(random.uniform(0.01, 0.08))  # noqa: S311 - a demo's jitter
            except LockNotAcquired:
                pass

    def job_runner() -> None:
        # Non-waiting runs of a few jobs: a held job is skipped (a refusal).
        while time.monotonic() < end:
            try:
                with lock(f"job:{random.randint(1, 3)}", ttl=10):  # noqa: S311
                    time.sleep(random.uniform(0.01, 0.05))  # noqa: S311
            except LockNotAcquired:
                time.sleep(0.01)

    def lost_cleanup() -> None:
        # An operator force-releases a running cleanup: its next renewal finds it lost.
        try:
            with lock("cleanup:nightly", ttl=0.6, auto_renew=True) as held:
                call_command("dlock", "release", "cleanup:nightly", "--yes", verbosity=0)
                held.lost.wait(5)
        except LockExpired:
            pass

    threads = [threading.Thread(target=report_writer) for _ in range(4)]
    threads += [threading.Thread(target=job_runner) for _ in range(2)]
    threads.append(threading.Thread(target=lost_cleanup))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # One lock held and one waiter queued as /metrics is served, for the gauges.
    holding, served = threading.Event(), threading.Event()

    def holder() -> None:
        with lock("export:monthly", ttl=30):
            holding.set()
            served.wait(10)

    def waiter() -> None:
        try:
            with lock("export:monthly", ttl=30, timeout=3):
                pass
        except LockNotAcquired:
            pass

    standing = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    standing[0].start()
    holding.wait(10)
    standing[1].start()
    time.sleep(0.5)  # the waiter queues
    response = Client().get("/metrics", HTTP_HOST="127.0.0.1")
    served.set()
    for thread in standing:
        thread.join()
    print(response.content.decode(), end="")  # noqa: T201 - the script's output


if __name__ == "__main__":
    main()
