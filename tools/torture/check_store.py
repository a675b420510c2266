"""Invariant 5: the store's counter (read, then written back plus one by each
accepted write) equals the number of accepted fenced writes, except for the
lost updates of overlaps that invariant 1 allows; and the store's log agrees
with what the writers recorded. (Readers change no counter.)"""

from __future__ import annotations

from collections.abc import Iterable

from tools.torture.sections import History
from tools.torture.violations import Violation


def counter(history: History, allowed: set[tuple[str, str]]) -> Iterable[Violation]:
    if history.store is None or history.log is None:
        return
    log = history.log
    for section in history.sections.values():
        for write in section.writes:
            recorded = None if write.event is None else write.event.get("accepted")
            if recorded is not None and recorded != (write.write_id in log):
                yield Violation(
                    5,
                    f"{section.cs}: the store's log disagrees with the writer about "
                    f"write {write.write_id}",
                    (write.event,) if write.event is not None else (),
                )
    rows_by_resource: dict[str, list[tuple[int, str, int, str, int]]] = {}
    for row in log.values():
        rows_by_resource.setdefault(row[1], []).append(row)
    for resource, state in history.store["resources"].items():
        rows = sorted(rows_by_resource.get(resource, []))
        excused, lost = 0, []
        # The writes whose updates the counter holds now, by the value each
        # wrote. A write of a value at or below the counter's (its read was
        # stale) undoes the updates from that value up: each is lost to this
        # write, and charged to this pair alone (the writes after it that
        # count up from its value again lose nothing).
        standing: list[tuple[int, str]] = []
        for _, _, _, write_id, value in rows:
            while standing and standing[-1][0] >= value:
                _, previous = standing.pop()
                pair = (previous.rpartition("#")[0], write_id.rpartition("#")[0])
                if pair in allowed or pair[::-1] in allowed:
                    excused += 1
                else:
                    lost.append((previous, write_id))
            standing.append((value, write_id))
        if state["counter"] != len(rows) - excused or lost:
            yield Violation(
                5,
                f"{resource}: counter {state['counter']} after {len(rows)} accepted writes "
                f"({excused} lost updates excused by allowed overlaps; lost: {lost[:3]})",
                (history.store,),
            )
        if rows and state.get("write_token", state["max_token"]) != max(r[2] for r in rows):
            yield Violation(
                5,
                f"{resource}: the store's largest token is not its last write's",
                (history.store,),
            )
