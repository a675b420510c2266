"""The release of a set of locks taken together, as both harnesses (the torture
run's ``kinds`` and the cluster's ``load``) record it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Runs one lock call and records it (op, the call, the event's fields); its
# outcome, or None when it raised.
Call = Callable[..., "dict[str, Any] | None"]


def release_all_told(
    call: Call,
    tell: Callable[[str, str], object],
    resources: Sequence[str],
    owner: str,
    sections: Sequence[str],
) -> None:
    """``release_all`` of ``resources`` by ``owner``, recorded by ``call``; each
    section (of ``sections``, one per resource) whose lock it did not release
    is told (``tell(cs, how)``): its holder learns that it may have lost it."""
    from django_dlock.models import DistributedLock
    from django_dlock.rules import ReleaseResult

    outcome = call(
        "release_all",
        lambda: {
            "results": [r.value for r in DistributedLock.objects.release_all(resources, owner)]
        },
        resources=list(resources),
        owner=owner,
        set=owner,
    )
    results = outcome["results"] if outcome else ["failed"] * len(sections)
    for cs, result in zip(sections, results, strict=True):
        if result != ReleaseResult.RELEASED.value:
            tell(cs, f"release_all: {result}")
