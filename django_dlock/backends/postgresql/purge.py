"""PostgreSQL's purge and its fencing floor: the purge raises the floor before
it deletes, and a first insert reads the floor locked (``FOR SHARE``), so a
purged resource's token is never issued again; the purge skips the rows and
holds that a lock operation holds locked, so it never deadlocks with one."""

from __future__ import annotations

from typing import Any

from django.db.models.expressions import RawSQL

from django_dlock.backends.purge import Purge, PurgedBatch


class PostgreSQLPurge(Purge):
    """The purge of ``PostgreSQLBackend``."""

    def _floor_sql(self) -> str:
        # FOR SHARE: a first insert waits for a purge that raised the floor and
        # has not committed, and then reads the floor as it committed (a locking
        # read returns the newest row, whatever the statement's snapshot). The
        # purge raises the floor before it deletes (``_purge_batch``): so an
        # insert that finds a purged resource's row gone (waiting for its
        # deletion if need be) has read the floor above that row's token, or
        # holds the floor, and the purge then deletes no row until it commits.
        qn = self.qn
        return f"SELECT {qn('value')} FROM {self.floor_table} WHERE {qn('id')} = 1 FOR SHARE"  # noqa: S608

    def _purge_batch(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        # First the floor, raised to the largest token of the batch as read
        # without locks, then the deletion of the batch's rows whose token is at
        # most that (a row released since is expired with a larger token, and
        # stays): every deleted token is below a floor raised before it went
        # (see ``_floor_sql``). The rows are chosen again by physical address
        # (ctid: a TID scan reaches each without an index lookup), skipping
        # those a lock operation holds locked: the purge waits for no lock
        # row, and so never deadlocks with operations that lock several in
        # their own order (``acquire_all()``). The database counts the batch.
        candidates = self._purge_candidates(older_than, prefix)
        chosen_sql, chosen_params = (
            candidates.values("fencing_token")[:batch_size]
            .query.get_compiler(using=self.using)
            .as_sql()
        )
        token = self.qn("fencing_token")
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT COUNT(*), MAX({token}) FROM ({chosen_sql}) chosen",  # noqa: S608
                chosen_params,
            )
            chosen, largest = cursor.fetchone()
        if not chosen:
            return PurgedBatch(chosen=0, deleted=0)
        self._raise_fencing_floor(largest)
        rows = (
            candidates.filter(fencing_token__lte=largest)
            .annotate(row=RawSQL("ctid", ()))
            .values("row")[:batch_size]
        )
        rows_sql, rows_params = rows.query.get_compiler(using=self.using).as_sql()
        sql = (
            f"DELETE FROM {self.table} WHERE ctid = ANY(ARRAY({rows_sql} "  # noqa: S608
            "FOR UPDATE SKIP LOCKED))"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, rows_params)
            return PurgedBatch(chosen=int(chosen), deleted=cursor.rowcount)

    def _delete_expired_holds(self, where: str, params: list[Any]) -> None:
        table, _, column = self._hold_names
        pk = column["id"]
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE {pk} = ANY(ARRAY(SELECT {pk} FROM {table} "  # noqa: S608
                f"WHERE {where} FOR UPDATE SKIP LOCKED))",
                params,
            )
