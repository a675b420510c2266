"""Who may hold a resource now: one table of cases, and every path that decides.

The rule (CONTRACT.md, "Lock kinds") is written more than once: in Python
(``backends.admission.admit``, which the portable operations carry out), and in
the SQL of PostgreSQL's one-statement operations and of MariaDB's one-row
``UPDATE``, which decide the cases they can and hand the others to the portable
operation. Each case below says what was held, what is asked, by whom and
behind which queue, and what the answer must be. The pure rule is checked
against every case without a database; then each case is built in the database
under test and the claim made through every path that vendor has, so that no
dialect can drift from the others unnoticed. The same test says which cases a
vendor's statements hand to the portable operation (``HANDED_OVER``), and
checks that a waiter's look at the queue (``locking.queue.state_of``) tries
exactly when the rule would admit a newcomer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from django_dlock.backends import backend_for
from django_dlock.backends.admission import Action, admit
from django_dlock.backends.base import LockBackend
from django_dlock.backends.results import LockRow, Taken
from django_dlock.conf import conf
from django_dlock.kinds import LockKind
from django_dlock.locking.waiting import queue_state
from django_dlock.rules import SHARED_HOLDERS, kind_of
from django_dlock.rules.claim import Claim
from tests.lock_cases import (
    DEAD_WRITER,
    READER,
    TTL,
    WRITER,
    A,
    Grants,
    Holder,
    Waiter,
    exclusive,
    handed_over,
    hold,
    label_of,
    paths,
    permit,
    permit_waiter,
    queue,
    reader,
)

# -- the table -----------------------------------------------------------------------


class Token(enum.Enum):
    """The fencing token a claim names as the grant it means to re-enter or
    change (``Claim.held_token``), where it names one."""

    ITS = "its grant's"  # lost, where that grant expired or was released
    EARLIER = "an earlier grant's"  # a grant it lost before the one it holds now


@dataclass(frozen=True)
class Ask:
    """The claim: who asks, and for what."""

    owner: str
    shared: bool = False
    limit: int | None = None
    reentrant: bool = False
    token: Token | None = None

    @property
    def exclusive(self) -> bool:
        return not self.shared and self.limit is None


@dataclass(frozen=True)
class Outcome:
    """What the claim gets: a new grant (a token larger than every earlier
    one), the grant it holds again (its token), nothing, or a mismatch that
    names the kind the resource is. ``holds``: the hold count of the grant."""

    answer: str
    holds: int | None = None
    kind: str | None = None

    def __str__(self) -> str:
        detail = self.kind if self.kind is not None else f"{self.holds} hold(s)"
        return self.answer if self.answer == "refused" else f"{self.answer} ({detail})"


NEW = Outcome("new token", holds=1)
SAME = Outcome("same token", holds=1)
REFUSED = Outcome("refused")


def new(holds: int) -> Outcome:
    return Outcome("new token", holds=holds)


def same(holds: int) -> Outcome:
    return Outcome("same token", holds=holds)


def mismatch(limit: int | None) -> Outcome:
    """The resource is a lock (``limit`` None) or a semaphore of ``limit`` permits."""
    return Outcome("mismatch", kind=kind_of(limit))


@dataclass(frozen=True)
class Case:
    id: str
    held: tuple[Holder, ...]  # () and not released: there was never a row
    asks: Ask
    expected: Outcome
    released: bool = False  # the holders released their holds (the row stays)
    ahead: tuple[Waiter, ...] = ()  # queued before the claim
    queued: bool = False  # the claim is a waiter's, its ticket behind ``ahead``
    behind: tuple[Waiter, ...] = ()  # queued after the claimant's ticket


def sem(
    limit: int, owner: str = "new", *, reentrant: bool = False, token: Token | None = None
) -> Ask:
    """A semaphore's permit asked for."""
    return Ask(owner, shared=True, limit=limit, reentrant=reentrant, token=token)


WRITE, READ = Ask("new"), Ask("new", shared=True)

# A holder with a lock-delay far longer than the test, and one whose delay
# (shorter than the second since its expiry) is over.
DELAY, SHORT_DELAY = 600.0, 0.5
DELAYED = exclusive(delay=DELAY)
LOST_WITH_DELAY = exclusive(expired=True, delay=DELAY)


CASES = (
    # -- nobody holds it ----------------------------------------------------------------
    Case("never-held/writer", (), WRITE, NEW),
    Case("never-held/reader", (), READ, NEW),
    Case("never-held/permit", (), sem(2), NEW),
    Case("purged/its-lost-token", (), Ask("a", token=Token.ITS), REFUSED),
    Case("purged/reader-its-lost-token", (), Ask("a", shared=True, token=Token.ITS), REFUSED),
    Case("released/writer", (A,), WRITE, NEW, released=True),
    Case("released/reader", (A,), READ, NEW, released=True),
    Case("released/permit", (A,), sem(2), NEW, released=True),
    Case("released/former-holder", (A,), Ask("a"), NEW, released=True),
    Case("released/its-lost-token", (A,), Ask("a", token=Token.ITS), REFUSED, released=True),
    Case(
        "released/downgrade-of-lost-grant",
        (A,),
        Ask("a", shared=True, token=Token.ITS),
        REFUSED,
        released=True,
    ),
    Case("expired-writer/writer", (exclusive(expired=True),), WRITE, NEW),
    Case("expired-writer-entered-twice/writer", (exclusive(holds=2, expired=True),), WRITE, NEW),
    Case("expired-writer/former-holder", (exclusive(expired=True),), Ask("a"), NEW),
    Case(
        "expired-writer/its-lost-token",
        (exclusive(expired=True),),
        Ask("a", token=Token.ITS),
        REFUSED,
    ),
    Case("expired-writer/reader", (exclusive(expired=True),), READ, NEW),
    Case("expired-writer/permit", (exclusive(expired=True),), sem(2), NEW),
    Case("expired-reader/writer", (reader("a", expired=True),), WRITE, NEW),
    Case("expired-reader/reader", (reader("a", expired=True),), READ, NEW),
    Case(
        "expired-reader/its-lost-token",
        (reader("a", expired=True),),
        Ask("a", shared=True, token=Token.ITS),
        REFUSED,
    ),
    Case("expired-permit/other-limit", (permit("a", 2, expired=True),), sem(3), NEW),
    # -- lost with a lock-delay: nobody's until it ends ------------------------------------
    Case("lost-with-delay/writer", (LOST_WITH_DELAY,), WRITE, REFUSED),
    Case("lost-with-delay/former-holder", (LOST_WITH_DELAY,), Ask("a"), REFUSED),
    Case("lost-with-delay/reader", (LOST_WITH_DELAY,), READ, REFUSED),
    Case("lost-with-delay/permit", (LOST_WITH_DELAY,), sem(2), REFUSED),
    Case("force-released-with-delay/writer", (DELAYED,), WRITE, REFUSED, released=True),
    Case("force-released-with-delay/former-holder", (DELAYED,), Ask("a"), REFUSED, released=True),
    Case("force-released-with-delay/reader", (DELAYED,), READ, REFUSED, released=True),
    Case("lost-delay-over/writer", (exclusive(expired=True, delay=SHORT_DELAY),), WRITE, NEW),
    Case("lost-delay-over/reader", (exclusive(expired=True, delay=SHORT_DELAY),), READ, NEW),
    Case("held-with-delay/writer", (DELAYED,), WRITE, REFUSED),
    Case("held-with-delay/again", (DELAYED,), Ask("a"), SAME),
    # -- an exclusive holder ----------------------------------------------------------
    Case("writer/writer", (A,), WRITE, REFUSED),
    Case("writer/reader", (A,), READ, REFUSED),
    Case("writer/again", (A,), Ask("a"), SAME),
    Case("writer/again-reentrant", (A,), Ask("a", reentrant=True), same(2)),
    Case("writer-entered-twice/again", (exclusive(holds=2),), Ask("a"), same(2)),
    Case("writer/again-its-token", (A,), Ask("a", token=Token.ITS), SAME),
    Case("writer/again-earlier-token", (A,), Ask("a", token=Token.EARLIER), REFUSED),
    Case("writer/downgrade", (A,), Ask("a", shared=True), NEW),
    Case("writer/downgrade-its-token", (A,), Ask("a", shared=True, token=Token.ITS), NEW),
    Case(
        "writer/downgrade-earlier-token",
        (A,),
        Ask("a", shared=True, token=Token.EARLIER),
        REFUSED,
    ),
    Case("writer/permit", (A,), sem(2), mismatch(None)),
    Case("writer/permit-by-holder", (A,), sem(2, owner="a"), mismatch(None)),
    # -- readers ------------------------------------------------------------------------
    Case("reader/reader", (reader("a"),), READ, NEW),
    Case("readers/reader", (reader("a"), reader("b")), READ, NEW),
    Case("reader/writer", (reader("a"),), WRITE, REFUSED),
    Case("reader/again", (reader("a"),), Ask("a", shared=True), SAME),
    Case("reader/again-reentrant", (reader("a"),), Ask("a", shared=True, reentrant=True), same(2)),
    Case("reader/again-its-token", (reader("a"),), Ask("a", shared=True, token=Token.ITS), SAME),
    Case(
        "reader/again-earlier-token",
        (reader("a"),),
        Ask("a", shared=True, token=Token.EARLIER),
        REFUSED,
    ),
    Case("reader/upgrade", (reader("a"),), Ask("a"), NEW),
    Case("reader-entered-twice/upgrade", (reader("a", holds=2),), Ask("a"), new(2)),
    Case("reader/upgrade-its-token", (reader("a"),), Ask("a", token=Token.ITS), NEW),
    Case("readers/upgrade", (reader("a"), reader("b")), Ask("a"), REFUSED),
    Case("reader/permit", (reader("a"),), sem(2), mismatch(None)),
    Case("readers-one-expired/upgrade", (reader("a", expired=True), reader("b")), Ask("b"), NEW),
    Case("readers-one-expired/writer", (reader("a", expired=True), reader("b")), WRITE, REFUSED),
    Case(
        "readers-one-expired/expired-one-again",
        (reader("a", expired=True), reader("b")),
        Ask("a", shared=True),
        NEW,
    ),
    Case(
        "readers-one-expired/its-lost-token",
        (reader("a", expired=True), reader("b")),
        Ask("a", shared=True, token=Token.ITS),
        REFUSED,
    ),
    # -- a semaphore ----------------------------------------------------------------------
    Case("semaphore-2-of-1/permit", (permit("a", 2),), sem(2), NEW),
    Case("semaphore-2-of-2/permit", (permit("a", 2), permit("b", 2)), sem(2), REFUSED),
    Case("semaphore-2-of-2/again", (permit("a", 2), permit("b", 2)), sem(2, "a"), SAME),
    Case(
        "semaphore-2-of-2/again-reentrant",
        (permit("a", 2), permit("b", 2)),
        sem(2, "a", reentrant=True),
        same(2),
    ),
    Case("semaphore-2-of-1/again-its-token", (permit("a", 2),), sem(2, "a", token=Token.ITS), SAME),
    Case(
        "semaphore-2-of-2/again-earlier-token",
        (permit("a", 2), permit("b", 2)),
        sem(2, "a", token=Token.EARLIER),
        REFUSED,
    ),
    Case(
        "semaphore-2-of-2-one-expired/permit",
        (permit("a", 2, expired=True), permit("b", 2)),
        sem(2),
        NEW,
    ),
    Case("semaphore-2/other-limit", (permit("a", 2),), sem(3), mismatch(2)),
    Case("semaphore-2/writer", (permit("a", 2),), WRITE, mismatch(2)),
    Case("semaphore-2/reader", (permit("a", 2),), READ, mismatch(2)),
    Case("semaphore-2/writer-by-holder", (permit("a", 2),), Ask("a"), mismatch(2)),
    # -- the queue ahead --------------------------------------------------------------------
    # A writer queued ahead keeps later readers out, also non-blocking ones
    # (writer preference); a re-entry is not a later reader.
    Case("never-held/reader-behind-writer", (), READ, REFUSED, ahead=(WRITER,)),
    Case("reader/reader-behind-writer", (reader("a"),), READ, REFUSED, ahead=(WRITER,)),
    Case(
        "reader/again-behind-writer", (reader("a"),), Ask("a", shared=True), SAME, ahead=(WRITER,)
    ),
    Case("reader/reader-behind-reader", (reader("a"),), READ, NEW, ahead=(READER,)),
    Case("never-held/reader-behind-dead-writer", (), READ, NEW, ahead=(DEAD_WRITER,)),
    Case("released/reader-behind-writer", (A,), READ, REFUSED, released=True, ahead=(WRITER,)),
    Case(
        "expired-writer/reader-behind-writer",
        (exclusive(expired=True),),
        READ,
        REFUSED,
        ahead=(WRITER,),
    ),
    # lock() makes a writer wait its turn; the manager's acquire does not queue.
    Case("never-held/writer-beside-queue", (), WRITE, NEW, ahead=(WRITER, READER)),
    Case("released/writer-beside-queue", (A,), WRITE, NEW, released=True, ahead=(WRITER,)),
    # A waiter counts only those queued before its ticket.
    Case(
        "reader/queued-reader-writer-behind",
        (reader("a"),),
        READ,
        NEW,
        ahead=(READER,),
        queued=True,
        behind=(WRITER,),
    ),
    Case("never-held/queued-reader-behind-writer", (), READ, REFUSED, ahead=(WRITER,), queued=True),
    Case("released/queued-writer", (A,), WRITE, NEW, released=True, queued=True, behind=(WRITER,)),
    # A queued holder's re-entry adds no hold: the lock was handed to it.
    Case("writer/queued-again-reentrant", (A,), Ask("a", reentrant=True), SAME, queued=True),
    # A permit is left for a newcomer only after those queued before it.
    Case("never-held/permit-behind-2", (), sem(2), REFUSED, ahead=(permit_waiter(2),) * 2),
    Case("never-held/permit-behind-1", (), sem(2), NEW, ahead=(permit_waiter(2),)),
    Case("released/permit-behind-2", (A,), sem(2), REFUSED, released=True, ahead=(READER, WRITER)),
    Case("released/permit-behind-1", (A,), sem(2), NEW, released=True, ahead=(READER,)),
    Case("semaphore-2-of-1/permit-behind-1", (permit("a", 2),), sem(2), REFUSED, ahead=(WRITER,)),
    Case("semaphore-3-of-1/permit-behind-1", (permit("a", 3),), sem(3), NEW, ahead=(WRITER,)),
    Case(
        "semaphore-3-of-1/queued-permit-behind-1",
        (permit("a", 3),),
        sem(3),
        NEW,
        ahead=(permit_waiter(3),),
        queued=True,
        behind=(permit_waiter(3),) * 2,
    ),
    Case(
        "semaphore-3-of-1/permit-behind-dead",
        (permit("a", 3),),
        sem(3),
        NEW,
        ahead=(Waiter(shared=True, limit=3, live=False),) * 3,
    ),
)


def table(cases: tuple[Case, ...] = CASES) -> list[object]:
    return [pytest.param(case, id=case.id) for case in cases]


def test_the_case_ids_are_unique_and_those_named_exist() -> None:
    ids = {case.id for case in CASES}
    assert len(ids) == len(CASES)
    assert HANDED_OVER["postgresql"] <= ids


# -- the claim -------------------------------------------------------------------------

CLAIMANT_LABEL = "claimant"


def the_claim(case: Case, resource: str, tokens: dict[str, int], ticket: int | None) -> Claim:
    """The claim of ``case`` on ``resource``, whose holders' grants have ``tokens``."""
    ask = case.asks
    held_token = None
    if ask.token is not None:
        token = tokens.get(ask.owner, 1)  # no row: a grant that was purged
        held_token = token - 1 if ask.token is Token.EARLIER else token
    return Claim(
        resource=resource,
        owner=ask.owner,
        duration=TTL,
        kind=LockKind(shared=not ask.exclusive, limit=ask.limit, reentrant=ask.reentrant),
        label=CLAIMANT_LABEL,
        ticket=ticket,
        held_token=held_token,
    )


# -- the rule in Python ----------------------------------------------------------------

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)
SOME_TICKET = 7  # the claimant's ticket, where it waits (admit() only sees its queue)


def rows_of(case: Case) -> tuple[LockRow, list[LockRow], dict[str, int]]:
    """The resource's row, its valid shared holds and the holders' tokens, as
    an acquisition would find them under the row lock."""
    tokens = {holder.owner: token for token, holder in enumerate(case.held, start=1)}

    def row(
        owner: str,
        expires_at: datetime,
        token: int,
        *,
        hold_count: int = 1,
        limit: int | None = None,
        shared: bool = False,
        delay: float | None = None,
    ) -> LockRow:
        return LockRow(
            pk=1,
            resource="r",
            owner=owner,
            acquired_at=NOW - timedelta(seconds=30),
            expires_at=expires_at,
            fencing_token=token,
            hold_count=hold_count,
            label="",
            limit=limit,
            now=NOW,
            shared=shared,
            lock_delay=None if delay is None else timedelta(seconds=delay),
        )

    def expiry(holder: Holder) -> datetime:
        return NOW - timedelta(seconds=1) if holder.expired else NOW + TTL

    if not case.held:
        # Never held: the portable operation inserts a released row and decides on it.
        return row("", NOW, 0), [], tokens
    first = case.held[0]
    if case.released:  # by an operator, a moment ago: a holder's lock-delay stays
        return row("", NOW, len(case.held), delay=first.delay), [], tokens
    if first.exclusive:
        held = row(first.owner, expiry(first), 1, hold_count=first.holds, delay=first.delay)
        return held, [], tokens
    holds = [
        row(h.owner, expiry(h), tokens[h.owner], hold_count=h.holds, limit=h.limit, shared=True)
        for h in case.held
    ]
    header = row(
        SHARED_HOLDERS,
        max(hold.expires_at for hold in holds),
        len(holds),
        hold_count=len(holds),
        limit=first.limit,
    )
    return header, [hold for hold in holds if hold.held], tokens


def queued_ahead(case: Case) -> tuple[int, int]:
    """The live waiters queued before the claim, and the writers among them."""
    live = [waiter for waiter in case.ahead if waiter.live]
    return len(live), sum(1 for waiter in live if not waiter.shared)


ACQUIRED = {
    Action.TAKE: "new token",
    Action.UPGRADE: "new token",
    Action.JOIN: "new token",
    Action.DOWNGRADE: "new token",
    Action.AGAIN: "same token",
    Action.AGAIN_SHARED: "same token",
}


@pytest.mark.vendor_independent
@pytest.mark.parametrize("case", table())
def test_the_python_rule(case: Case) -> None:
    header, holds, tokens = rows_of(case)
    claim = the_claim(case, "r", tokens, SOME_TICKET if case.queued else None)
    admission = admit(header, holds, claim, queued_ahead(case))
    if admission.action is Action.REFUSE:
        answer = REFUSED
    elif admission.action is Action.MISMATCH:
        answer = Outcome("mismatch", kind=admission.kind)
    else:
        # How many holds the grant has is the operation's to write, not the rule's.
        answer = Outcome(ACQUIRED[admission.action], holds=case.expected.holds)
    assert answer == case.expected


# -- the rule in each database ---------------------------------------------------------


@dataclass(frozen=True)
class Situation:
    grants: Grants  # the holders'
    ticket: int | None  # the claimant's, where it waits


def build(case: Case, resource: str, backend: LockBackend) -> Situation:
    """Make ``case``'s holders and queue on ``resource`` as the public calls
    and the waiter queue make them."""
    grants = hold(resource, case.held, released=case.released)
    session = backend.queue.session_pid()  # this connection's, which lives through the test
    for waiter in case.ahead:
        queue(backend, resource, waiter, session)
    ticket = None
    if case.queued:
        claim = the_claim(case, resource, grants.tokens, None)
        ticket, _ = backend.queue.enqueue_waiter(claim, TTL.total_seconds(), listener_pid=session)
    for waiter in case.behind:
        queue(backend, resource, waiter, session)
    return Situation(grants, ticket)


def outcome_of(taken: Taken, claimant: tuple[int, datetime] | None, highest: int) -> Outcome:
    """What ``taken`` gave a claimant whose grant had the token and start
    ``claimant`` (None: it holds none), on a resource whose largest token was
    ``highest``. The same grant keeps its start and label and is announced as
    renewed; a new one carries the claim's label and is announced as acquired."""
    if taken.mismatch is not None:
        return Outcome("mismatch", kind=taken.mismatch)
    row = taken.row
    if row is None:
        return REFUSED
    grant = (row.fencing_token, row.acquired_at)
    if grant == claimant and taken.renewed and row.label == label_of(row.owner):
        return same(row.hold_count)
    if row.fencing_token > highest and not taken.renewed and row.label == CLAIMANT_LABEL:
        return new(row.hold_count)
    return Outcome(
        f"token {row.fencing_token} (highest {highest}), renewed={taken.renewed}, "
        f"label {row.label!r}",
        holds=row.hold_count,
    )


LOOK = "a waiter's look"
HANDED = ", handed to the portable operation"

# The cases a vendor's statements leave to the portable operation (which then
# runs in a transaction of its own): PostgreSQL's where the resource's row alone
# cannot settle them (no row yet, an upgrade or a downgrade, another kind, a
# semaphore its count says is full); MariaDB's one-row UPDATE settles only an
# exclusive claim (outside the queue, or a waiter's, ``mysql.queued_take``) of a
# resource that has a row and no shared holders. A change here is a change of
# how many round trips a case costs.
HANDED_OVER: dict[str, frozenset[str]] = {
    "postgresql": frozenset(
        {
            "never-held/reader",
            "never-held/permit",
            "purged/reader-its-lost-token",
            "writer/downgrade",
            "writer/downgrade-its-token",
            "writer/downgrade-earlier-token",
            "writer/permit",
            "writer/permit-by-holder",
            "reader/writer",
            "reader/upgrade",
            "reader-entered-twice/upgrade",
            "reader/upgrade-its-token",
            "readers/upgrade",
            "reader/permit",
            "readers-one-expired/upgrade",
            "readers-one-expired/writer",
            "semaphore-2-of-2/permit",
            "semaphore-2-of-2-one-expired/permit",
            "semaphore-2/other-limit",
            "semaphore-2/writer",
            "semaphore-2/reader",
            "semaphore-2/writer-by-holder",
            "never-held/reader-behind-writer",
            "never-held/reader-behind-dead-writer",
            "never-held/queued-reader-behind-writer",
            "never-held/permit-behind-2",
            "never-held/permit-behind-1",
            "semaphore-2-of-1/permit-behind-1",
        }
    ),
    "mysql": frozenset(case.id for case in CASES)
    - {
        "released/writer",
        "expired-writer-entered-twice/writer",
        "released/former-holder",
        "released/its-lost-token",
        "expired-writer/writer",
        "expired-writer/former-holder",
        "expired-writer/its-lost-token",
        "expired-reader/writer",
        "lost-with-delay/writer",
        "lost-with-delay/former-holder",
        "force-released-with-delay/writer",
        "force-released-with-delay/former-holder",
        "lost-delay-over/writer",
        "held-with-delay/writer",
        "held-with-delay/again",
        "writer/writer",
        "writer/again",
        "writer/again-reentrant",
        "writer-entered-twice/again",
        "writer/again-its-token",
        "writer/again-earlier-token",
        "released/writer-beside-queue",
        "released/queued-writer",
        "writer/queued-again-reentrant",
    },
}


@pytest.mark.django_db(transaction=True)  # the vendors' statements run only outside a transaction
@pytest.mark.parametrize("case", table())
def test_every_path_of_the_database(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = backend_for(conf.DATABASE)
    answers: dict[str, str] = {}
    for name, take in paths(backend, "take").items():
        situation = build(case, resource_of(case, name), backend)
        grants = situation.grants
        claim = the_claim(case, resource_of(case, name), grants.tokens, situation.ticket)
        owner = case.asks.owner
        claimant = None
        if holds_still(case):
            claimant = (grants.tokens[owner], grants.acquired[owner])
        with handed_over(monkeypatch, "take") as portable:
            outcome = outcome_of(take(claim), claimant, grants.highest)
        answers[name] = f"{outcome}{HANDED if portable and name != 'portable' else ''}"
    expected = dict.fromkeys(answers, str(case.expected))
    for name in answers.keys() - {"portable"}:
        if case.id in HANDED_OVER[backend.vendor]:
            expected[name] += HANDED
    if case.asks.owner == "new":
        # A waiter of lock() tries to acquire when its look at the queue says the
        # rule admits it (and on a mismatch, so that the acquisition raises it);
        # a writer also waits for those queued before it.
        situation = build(case, resource_of(case, LOOK), backend)
        claim = the_claim(case, resource_of(case, LOOK), situation.grants.tokens, situation.ticket)
        state = queue_state(conf.DATABASE, claim, situation.ticket)
        answers[LOOK] = "tries" if state.admissible else "waits"
        writer_waits = claim.exclusive and any(waiter.live for waiter in case.ahead)
        expected[LOOK] = "waits" if case.expected == REFUSED or writer_waits else "tries"
    assert answers == expected


def resource_of(case: Case, path: str) -> str:
    """The resource each path's copy of the case is built on."""
    return f"admission:{case.id}:{path}".replace("/", ":").replace(" ", "-")


def holds_still(case: Case) -> bool:
    """Whether the claimant validly holds the resource when it asks."""
    return not case.released and any(
        holder.owner == case.asks.owner and not holder.expired for holder in case.held
    )
