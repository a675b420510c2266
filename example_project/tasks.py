"""A task of the example project that runs under a lock (see README "Celery")."""

from __future__ import annotations

import logging

from celery import shared_task

from django_dlock.contrib.celery import locked_task

logger = logging.getLogger(__name__)


@shared_task(max_retries=10)
@locked_task("report:{month}", ttl=300, on_locked="retry")
def build_monthly_report(month: str, fencing_token: int) -> str:
    """One report per month at a time, on whichever worker gets it first."""
    logger.info("Building the report of %s (fencing token %d)", month, fencing_token)
    return f"report {month} built with fencing token {fencing_token}"
