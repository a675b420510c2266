"""The checker of a torture run's history: ``check(events) -> [Violation]``.

A pure function of the history (see ``history.py``, read back by
``sections.py``). The invariants, each in the module that checks it:

1. No exclusive hold overlaps any other hold, unless the earlier one was
   gone and told and the store refused its late writes (``check_holds``).
2. Fencing tokens increase per resource in acquisition order, across kinds,
   and a token goes to one owner only (``check_tokens``).
3. A release or renew that succeeded was made by a holder (``check_tokens``).
4. A lock call made while a fault made the database unusable raised a
   database error (``check_faults``).
5. The store's counter equals the accepted fenced writes (``check_store``).
6. Nothing is lost: each snapshot of the lock tables has the latest valid
   hold of each resource, and no token below one granted (``check_snapshots``).
7. Readers ran together: some reader sections overlapped (``check_holds``).
8. Never more than N valid permits of a semaphore at once (``check_holds``).
9. Hold counts match the calls (``check_kinds``).
10. No reader is admitted past a queued writer (``check_kinds``).
11. An all-or-nothing call never leaves a part held (``check_kinds``).
12. At most one valid leader term at a time, and terms strictly increase
    (``check_holds`` and ``check_tokens`` on the leaders' resources).
13. No window of one period holds more than N granted uses of a throttle's
    key (``check_throttles``).
14. A throttle refuses only while the period before holds N grants, and its
    ``retry_after`` and ``remaining`` agree with them (``check_throttles``).
15. Two grants of a ``once_per`` (or ``min_hold``) resource are at least
    ``every`` apart (``check_windows``).
16. No grant inside a lock-delay: after an exclusive hold with ``lock_delay``
    was lost (expired, or force-released), the resource's next grant comes
    no sooner than that moment + the delay (``check_delays``).
17. No waiter passed by one with a worse key: when a waiter is granted, no
    waiter with a smaller key (``lock(priority=N)``: the database's time of
    queuing less N minutes) queued before the lock came free still waits
    (``check_priorities``).
18. No guarded write (``held.atomic()``) outside its owner's validity: the
    blocks commit in token order per resource, none that began after a later
    grant returned commits, and each writer's answer matches the table
    (``check_guarded``).
"""

from __future__ import annotations

from tools.torture.check_delays import delays
from tools.torture.check_faults import faults
from tools.torture.check_guarded import guarded
from tools.torture.check_holds import overlaps, permits, readers_together
from tools.torture.check_kinds import all_or_nothing, hold_counts, writer_preference
from tools.torture.check_priorities import priorities
from tools.torture.check_snapshots import snapshots
from tools.torture.check_store import counter
from tools.torture.check_throttles import decisions, limits
from tools.torture.check_tokens import owners, tokens
from tools.torture.check_windows import windows
from tools.torture.history import Event
from tools.torture.sections import read
from tools.torture.violations import INVARIANTS, Violation

__all__ = ["INVARIANTS", "Violation", "check"]


def check(events: list[Event]) -> list[Violation]:
    """Every violation of the invariants in ``events``, in invariant order."""
    history = read(events)
    allowed: set[tuple[str, str]] = set()  # overlaps invariant 1 allows (for 5)
    violations = list(overlaps(history, allowed))
    violations += tokens(history)
    violations += owners(history)
    violations += faults(history)
    violations += counter(history, allowed)
    violations += snapshots(history)
    violations += readers_together(history)
    violations += permits(history)
    violations += hold_counts(history)
    violations += writer_preference(history)
    violations += all_or_nothing(history)
    violations += limits(history)
    violations += decisions(history)
    violations += windows(history)
    violations += delays(history)
    violations += priorities(history)
    violations += guarded(history)
    return sorted(violations, key=lambda violation: violation.invariant)
