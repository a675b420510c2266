"""``python -m tests.dlock_manage ARGS...``: ``manage.py ARGS...`` in a worker
process, on the test database that ``DLOCK_TEST_DATABASE`` (JSON of
``tests.utils.database_settings()``) names. The ``dlock`` command's tests run
it as operators and cron run ``manage.py dlock``."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys

from tests.utils import setup_worker


def main() -> None:
    # As if started from a terminal: a test run started in the background
    # (``pytest &``) ignores SIGINT, and its children would inherit that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    # A test that gave up waiting for this process asks it for its threads' stacks.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    setup_worker(json.loads(os.environ["DLOCK_TEST_DATABASE"]))
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
