"""A prefix matches case-sensitively on every database: the API's list, the
queryset, and ``purge_locks --prefix`` (all through ``django_dlock.prefix``)."""

from __future__ import annotations

from io import StringIO

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User
from django.core.management import call_command

from django_dlock.models import DistributedLock
from django_dlock.prefix import successor
from tests.api_utils import client_for
from tests.utils import make_lock

pytestmark = pytest.mark.django_db

RESOURCES = ["JOB:1", "Job:2", "job:42", "job:43", "jobs", "jöb", "JÖB", "job%", "job_", "jo"]


def prefixed(prefix: str) -> list[str]:
    locks = DistributedLock.objects.with_resource_prefix(prefix)
    return sorted(locks.values_list("resource", flat=True))


def test_queryset_prefix_is_case_sensitive() -> None:
    for resource in RESOURCES:
        make_lock(resource)
    assert prefixed("JOB") == ["JOB:1"]
    assert prefixed("job") == ["job%", "job:42", "job:43", "job_", "jobs"]
    assert prefixed("job:4") == ["job:42", "job:43"]
    assert prefixed("jö") == ["jöb"]
    assert prefixed("JÖ") == ["JÖB"]
    # LIKE's wildcards are plain characters in a prefix.
    assert prefixed("job%") == ["job%"]
    assert prefixed("job_") == ["job_"]
    assert prefixed("") == sorted(RESOURCES)


def test_api_list_prefix_is_case_sensitive() -> None:
    client = client_for(User.objects.create_user("alice"))
    for resource in ("job:42", "JOB:1"):
        make_lock(resource)
    listed = client.get("/api/locks", {"prefix": "JOB"}).json()["results"]
    assert [lock["resource"] for lock in listed] == ["JOB:1"]
    listed = client.get("/api/locks", {"prefix": "job"}).json()["results"]
    assert [lock["resource"] for lock in listed] == ["job:42"]


def test_purge_prefix_is_case_sensitive() -> None:
    for resource in ("JOB:1", "JOB:2", "job:1", "Job:3"):
        make_lock(resource, expires_in=-10)
    out = StringIO()
    call_command("purge_locks", "--prefix", "job", stdout=out)
    assert sorted(DistributedLock.objects.values_list("resource", flat=True)) == [
        "JOB:1",
        "JOB:2",
        "Job:3",
    ]


def test_prefix_edges_of_the_code_point_range() -> None:
    for resource in ("a\U0010ffff", "a\U0010ffffz", "b", "\ud7ff-x", "\ue000"):
        make_lock(resource)
    assert prefixed("a\U0010ffff") == ["a\U0010ffff", "a\U0010ffffz"]
    assert prefixed("a") == ["a\U0010ffff", "a\U0010ffffz"]
    assert prefixed("\ud7ff") == ["\ud7ff-x"]


def test_successor() -> None:
    assert successor("job") == "joc"
    assert successor("a\U0010ffff") == "b"
    assert successor("\U0010ffff") is None
    assert successor("\ud7ff") == "\ue000"
    assert successor("") is None
