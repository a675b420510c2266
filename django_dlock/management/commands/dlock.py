"""``manage.py dlock``: the locks for operators and cron, in the manner of
``flock(1)`` and ``etcdctl lock``. ``list``, ``show`` and ``release`` look at
and force-release holds; ``run`` runs a command while holding a lock."""

from __future__ import annotations

import math
import os
import socket
from argparse import ArgumentParser, Namespace
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_dlock.cli import arguments, inspect
from django_dlock.cli.run import RunOptions, run
from django_dlock.kinds import LockKind

# What ``run`` exits with when the lock is held and it does not wait (or its
# wait ends): EX_TEMPFAIL, "try again later", as flock(1) -E suggests.
DEFAULT_CONFLICT_EXIT_CODE = 75
# Seconds between the SIGTERM and the SIGKILL that stop CMD's process group.
DEFAULT_KILL_AFTER = 2.0


class Command(BaseCommand):
    help = (
        "Look at and force-release locks (list, show, release), or run a command while "
        "holding one (run RESOURCE [options] -- CMD [ARGS...])."
    )

    # Set by run_from_argv: called as ``manage.py dlock``, not by call_command().
    from_command_line = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def add_arguments(self, parser: ArgumentParser) -> None:
        assert isinstance(parser, CommandParser)  # noqa: S101 - BaseCommand.create_parser makes one
        actions = parser.add_subparsers(
            dest="action", required=True, metavar="{list,show,release,run}", parser_class=_Parser
        )
        listing = actions.add_parser("list", help="The held locks, with their waiters.")
        listing.add_argument(
            "--prefix", type=arguments.prefix, default=None, help="Only resources starting with it."
        )
        listing.add_argument("--all", action="store_true", help="Also expired and released locks.")
        _show_owners(listing)
        listing.add_argument(
            "--graph",
            action="store_true",
            help="Also the waiters that hold other locks, what they hold, and any "
            "deadlock among them (never owners).",
        )

        showing = actions.add_parser("show", help="One resource: its holds and waiters.")
        showing.add_argument("resource", type=arguments.resource, metavar="RESOURCE")
        _show_owners(showing)
        showing.add_argument(
            "--graph",
            action="store_true",
            help="Also the wait-for graph around it: who holds it and waits for what, "
            "what its waiters hold, a few steps on, and any deadlock (never owners).",
        )

        releasing = actions.add_parser(
            "release", help="Force-release a lock, asking first unless --yes."
        )
        releasing.add_argument("resource", type=arguments.resource, metavar="RESOURCE")
        releasing.add_argument(
            "--holder", type=arguments.label, metavar="LABEL", help="Only the hold with this label."
        )
        releasing.add_argument("--yes", action="store_true", help="Do not ask.")

        running = actions.add_parser(
            "run",
            help="Run CMD while holding the lock on RESOURCE.",
            usage="%(prog)s RESOURCE [options] -- CMD [ARGS...]",
            command_after_dashes=True,
        )
        running.add_argument("resource", type=arguments.resource, metavar="RESOURCE")
        running.add_argument(
            "--wait",
            type=arguments.seconds,
            nargs="?",
            const=math.inf,
            default=None,
            metavar="SECONDS",
            help="Wait that long for the lock (without SECONDS: without end); "
            "default: exit at once when it is held.",
        )
        running.add_argument(
            "--ttl",
            type=arguments.ttl,
            default=None,
            metavar="SECONDS",
            help="The lock's ttl, renewed every ttl/3 while CMD runs (default: DLOCK_DEFAULT_TTL).",
        )
        kinds = running.add_mutually_exclusive_group()
        kinds.add_argument(
            "--shared",
            action="store_true",
            help="Hold it as one of many readers (none beside an exclusive holder).",
        )
        kinds.add_argument(
            "--limit",
            type=arguments.limit,
            default=None,
            metavar="N",
            help="Hold one of at most N permits of a semaphore.",
        )
        # In the group of the kinds: a lock-delay is for an exclusive holder only.
        kinds.add_argument(
            "--lock-delay",
            type=arguments.lock_delay,
            default=None,
            metavar="SECONDS",
            help="When the lock is lost rather than released (its lease runs out, or an "
            "operator force-releases it), nobody may take it for that long after "
            "(exclusive locks only; default: none).",
        )
        running.add_argument(
            "--label",
            type=arguments.label,
            default=None,
            help='A public name for this holder (default: "HOST pid PID"); CMD gets it '
            "as DLOCK_LABEL.",
        )
        running.add_argument(
            "--conflict-exit-code",
            type=arguments.exit_code,
            default=DEFAULT_CONFLICT_EXIT_CODE,
            metavar="N",
            help="Exit with N when the lock is held by another (default: %(default)s).",
        )
        running.add_argument(
            "--min-hold",
            type=arguments.seconds,
            default=0.0,
            metavar="SECONDS",
            help="Keep the lock at least that long after taking it, also when CMD "
            "ends sooner (cron on hosts whose clocks differ).",
        )
        running.add_argument(
            "--kill-after",
            type=arguments.seconds,
            default=DEFAULT_KILL_AFTER,
            metavar="SECONDS",
            help="When the lock is lost, SIGKILL CMD's process group this long after "
            "its SIGTERM (default: %(default)s).",
        )

    def handle(self, *, action: str, **options: Any) -> None:
        try:
            if action == "list":
                inspect.list_holds(
                    self.stdout.write,
                    prefix=options["prefix"] or "",
                    include_free=options["all"],
                    show_owners=options["show_owners"],
                    graph=options["graph"],
                )
            elif action == "show":
                inspect.show(
                    self.stdout.write,
                    options["resource"],
                    show_owners=options["show_owners"],
                    graph=options["graph"],
                )
            elif action == "release":
                confirm = _yes if options["yes"] else _ask
                inspect.release(
                    self.stdout.write,
                    options["resource"],
                    holder=options["holder"],
                    confirm=confirm,
                )
            else:
                self._run(options)
        except DatabaseError as error:
            raise CommandError(f"The lock database failed: {error}") from None

    def _run(self, options: dict[str, Any]) -> None:
        label = options["label"] or f"{socket.gethostname()} pid {os.getpid()}"
        status = run(
            RunOptions(
                resource=options["resource"],
                command=options["command"],
                wait=options["wait"],
                ttl=options["ttl"],
                kind=LockKind.from_flags(shared=options["shared"], limit=options["limit"]),
                label=label,
                conflict_exit_code=options["conflict_exit_code"],
                min_hold=options["min_hold"],
                lock_delay=options["lock_delay"],
                kill_after=options["kill_after"],
            ),
            say=self.stderr.write,
        )
        if status == 0:
            return
        if self.from_command_line:
            # CMD's exit status, passed through as flock(1) does: CMD has said
            # what went wrong, and a CommandError would add a line to cron's mail.
            raise SystemExit(status)
        raise CommandError(f"The command exited with status {status}.", returncode=status)


def _show_owners(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--show-owners",
        action="store_true",
        help="Also the owners: secret tokens, with which anyone can release the lock.",
    )


def _yes(question: str) -> bool:
    return True


def _ask(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        raise CommandError(
            "No answer to the question (standard input is closed): pass --yes to "
            "release without asking."
        ) from None
    return answer.strip().lower() in ("y", "yes")


class _Parser(CommandParser):
    """The actions' parser. ``run``'s takes everything after the first ``--`` as
    CMD and its arguments, unparsed (argparse's REMAINDER would swallow the
    options given after RESOURCE)."""

    def __init__(self, *, command_after_dashes: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.command_after_dashes = command_after_dashes

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Namespace | None = None
    ) -> tuple[Namespace, list[str]]:
        if not self.command_after_dashes:
            return super().parse_known_args(args, namespace)
        args = list(args or [])
        if "--" not in args:
            self.error("give the command to run after --, as in: run job:42 -- ./job.sh")
        split = args.index("--")
        parsed, extras = super().parse_known_args(args[:split], namespace)
        parsed.command = args[split + 1 :]
        if not parsed.command:
            self.error("the command to run is missing after --")
        return parsed, extras
