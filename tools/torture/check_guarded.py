"""Invariant 18: no guarded write (``held.atomic()``, ``guarded.py``) commits
outside its owner's validity.

- Along a resource's sequence (the order in which the guarded blocks
  committed), the fencing tokens never go down: a block of an older grant
  never commits after one of a later grant.
- No committed row was written by a block that began after a later grant of
  its resource (a larger token, not the holder again) had returned: the
  block's first statement must have refused it.
- A block its writer saw commit left its row, and one it saw refused left none.
"""

from __future__ import annotations

from collections.abc import Iterable

from tools.torture.sections import History
from tools.torture.violations import Violation


def guarded(history: History) -> Iterable[Violation]:
    final = [event for event in history.events if event["op"] == "guarded_final"]
    if not final:
        return
    rows = {row[3]: row for row in final[-1]["rows"]}  # write_id -> [seq, resource, token, id]
    writes = {e["write_id"]: e for e in history.events if e["op"] == "guarded_write"}
    by_resource: dict[str, list[list[object]]] = {}
    for row in rows.values():
        by_resource.setdefault(str(row[1]), []).append(row)
    for resource, committed in by_resource.items():
        committed.sort(key=lambda row: int(str(row[0])))
        for before, after in zip(committed, committed[1:], strict=False):
            if int(str(after[2])) < int(str(before[2])):
                yield Violation(
                    18,
                    f"{resource}: guarded write {after[3]} (token {after[2]}) committed after "
                    f"{before[3]} (token {before[2]})",
                    tuple(w for w in (writes.get(str(before[3])), writes.get(str(after[3]))) if w),
                )
        grants = [a for a in history.acquisitions.get(resource, []) if not a.regrant]
        for row in committed:
            write = writes.get(str(row[3]))
            if write is None:
                continue  # its writer was killed before it could record the write
            later = [g for g in grants if g.token > int(str(row[2])) and g.t1 < write["t0"]]
            if later:
                yield Violation(
                    18,
                    f"{resource}: guarded write {row[3]} (token {row[2]}) committed although "
                    f"{later[0].owner}'s grant (token {later[0].token}) had returned before "
                    "its block began",
                    (write, later[0].event),
                )
    for write_id, write in writes.items():
        if "committed" in write and write["committed"] != (write_id in rows):
            yield Violation(
                18,
                f"guarded write {write_id}: its writer saw it "
                f"{'committed' if write['committed'] else 'refused'}, the table disagrees",
                (write,),
            )
