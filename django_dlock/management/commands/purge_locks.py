"""``manage.py purge_locks``: delete expired and released locks, in batches."""

from __future__ import annotations

import logging
import time
from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_dlock.cli import arguments
from django_dlock.conf import conf
from django_dlock.exceptions import LockTransactionError
from django_dlock.models import DistributedLock
from django_dlock.throttles.purge import count_free_keys, purge_free_keys

logger = logging.getLogger("django_dlock.purge_locks")

DEFAULT_BATCH_SIZE = 10_000


def batch_size(value: str) -> int:
    """``--batch-size``: a whole number, 1 or more."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ArgumentTypeError(f"must be a whole number, 1 or more, not {value!r}")
    return number


class Command(BaseCommand):
    help = (
        "Delete expired and released locks, in batches of their own transaction. "
        "A lock renewed or acquired while the command runs is kept, and fencing tokens "
        "keep increasing for purged resources. Also deletes throttle keys whose every "
        "use has left its window."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--older-than",
            type=arguments.seconds,
            default=0,
            metavar="SECONDS",
            help="Keep locks that expired less than SECONDS ago, and throttle keys whose last "
            "use left its window less than SECONDS ago (default: 0, delete all expired).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count the locks that would be deleted; delete nothing.",
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help="Delete at most N locks per transaction (default: %(default)s).",
        )
        parser.add_argument(
            "--prefix",
            type=arguments.prefix,
            default=None,
            metavar="STR",
            help="Only locks whose resource, and throttle keys that, start with STR.",
        )

    def handle(
        self,
        *,
        older_than: float,
        dry_run: bool,
        batch_size: int,
        prefix: str | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        prefix = prefix or ""
        with self._log_to_stdout(verbosity):
            try:
                if dry_run:
                    count = self._count(older_than=older_than, prefix=prefix)
                    logger.info("Would delete %d lock(s)", count)
                    keys = count_free_keys(conf.DATABASE, older_than=older_than, prefix=prefix)
                    if keys:
                        logger.info("Would delete %d throttle key(s)", keys)
                else:
                    deleted = self._purge(
                        older_than=older_than, batch_size=batch_size, prefix=prefix
                    )
                    logger.info("Deleted %d lock(s)", deleted)
                    keys = purge_free_keys(
                        conf.DATABASE, older_than=older_than, batch_size=batch_size, prefix=prefix
                    )
                    # A line of its own, only when there were any: the first
                    # line stays what scripts that read it expect.
                    if keys:
                        logger.info("Deleted %d throttle key(s)", keys)
            except LockTransactionError as error:
                raise CommandError(str(error)) from error

    def _purge(self, *, older_than: float, batch_size: int, prefix: str) -> int:
        batches = deleted = 0
        started = time.monotonic()

        def log_batch(count: int) -> None:
            nonlocal batches, deleted
            batches += 1
            deleted += count
            logger.debug(
                "Batch %d: deleted %d lock(s), %d so far (%.1f s)",
                batches,
                count,
                deleted,
                time.monotonic() - started,
            )

        # One transaction per batch: no long table locks, and memory bounded by a batch.
        return DistributedLock.objects.purge_expired(
            older_than=older_than, batch_size=batch_size, prefix=prefix, on_batch=log_batch
        )

    def _count(self, *, older_than: float, prefix: str) -> int:
        # What the purge would delete: not a row whose lock-delay still runs.
        locks = DistributedLock.objects.using(conf.DATABASE).purgeable(older_than)
        if prefix:
            locks = locks.with_resource_prefix(prefix)
        return locks.count()

    def _log_to_stdout(self, verbosity: int) -> _StdoutLogging:
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        return _StdoutLogging(self.stdout, level)


class _StdoutLogging:
    """While the command runs, ``django_dlock.purge_locks`` records of ``level`` and
    above go to the command's stdout (so ``call_command(stdout=...)`` sees them);
    the project's own logging configuration still receives them as well."""

    def __init__(self, stream: Any, level: int) -> None:
        self.handler = logging.StreamHandler(stream)
        self.handler.setLevel(level)
        self.level = level

    def __enter__(self) -> None:
        self.previous_level = logger.level
        if logger.getEffectiveLevel() > self.level:
            logger.setLevel(self.level)
        logger.addHandler(self.handler)

    def __exit__(self, *exc_info: object) -> None:
        logger.removeHandler(self.handler)
        logger.setLevel(self.previous_level)
