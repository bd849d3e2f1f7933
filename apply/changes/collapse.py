"""Collapse a table's row changes to the net change per key.

MERGE INTO needs at most one source row per key, and one MERGE per batch is
far cheaper than one per event. The net change of a key is its last mutation:
an upsert carrying the full row image, or a delete.

Order: by commitTs, then arrival. Within one commitTs a key can see a delete
and an upsert only when TiCDC split one UPDATE into DELETE(old) + INSERT(new)
(TiDB emits one final mutation per key per transaction); the row exists after
such a transaction, so at equal commitTs the upsert wins whatever partition
each half arrived on. For offset-ordered protocols the order is arrival only:
a key's changes all come from one partition, in commit order.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from operator import attrgetter, itemgetter
from typing import NamedTuple

from ticdc_delta.schema_cache.events import Op, RowChange


class NetChange(NamedTuple):
    """The final state of one key: its row image, or its deletion.

    For a delete, `values` is the last known image; only the key columns matter.
    """

    deleted: bool
    values: tuple


_by_commit_ts = attrgetter("commit_ts")


def collapse(rows: Sequence[RowChange], *, by_commit_ts: bool = True) -> list[NetChange]:
    """The net change per key of `rows`, which must share one handle key (`collapse_run`'s first half)."""
    return collapse_run(rows, by_commit_ts=by_commit_ts)[0]


def collapse_run(rows: Sequence[RowChange], *, by_commit_ts: bool = True) -> tuple[list[NetChange], bool]:
    """The net change per key of `rows`, which must share one handle key, and whether every key is new.

    One pass in arrival order. The gate releases rows ordered by commitTs
    already; rows that are not (a caller's own list) are first put in that
    order, keeping arrival order within a commitTs. At one commitTs an upsert
    of a key beats a delete of it whatever their order: only a split UPDATE
    produces both. `by_commit_ts` False: the protocol's order is arrival order.

    A key is new when its first change is an INSERT and no delete of it shares
    that INSERT's commitTs (the other half of a split UPDATE: the key existed):
    upstream lacked it just before, so a table equal to upstream at the point
    before `rows` lacks it too (docs/guarantees.md says where a table may not
    be). Always False in arrival order (a redelivered INSERT there is not
    known by its position).
    """
    if not rows:
        return [], False
    if by_commit_ts and any(a.commit_ts > b.commit_ts for a, b in pairwise(rows)):
        rows = sorted(rows, key=_by_commit_ts)  # stable: arrival order within a commitTs
    key_of = itemgetter(*rows[0].schema.key_indexes())
    # key -> (commitTs, deleted, image)
    final: dict[object, tuple[int, bool, tuple]] = {}
    get = final.get
    tie_rule = by_commit_ts
    # While every key so far is new: key -> the commitTs of the INSERT that brought it.
    born: dict[object, int] | None = {} if by_commit_ts else None
    for row in rows:
        op, ts = row.op, row.commit_ts
        if op is Op.INSERT or op is Op.UPSERT:
            key = key_of(row.after)
            if born is not None and key not in born:
                # (While `born` holds, every key seen is in it: a key it lacks is seen first here.)
                if op is Op.INSERT:
                    born[key] = ts
                else:
                    born = None
            final[key] = (ts, False, row.after)
            continue
        if op is Op.UPDATE:
            old_key, new_key = key_of(row.before), key_of(row.after)
            if born is not None and not (old_key in born and new_key in born):
                born = None
            if old_key == new_key:
                final[new_key] = (ts, False, row.after)
                continue
            # A key-changing UPDATE moves the row: delete the old key.
            delete_key, delete_image = old_key, row.before
            final[new_key] = (ts, False, row.after)
        else:
            delete_key, delete_image = key_of(row.before), row.before
            if born is not None and born.get(delete_key, ts) == ts:
                born = None  # a key this run did not bring, or the delete half of a split UPDATE
        current = get(delete_key)
        if tie_rule and current is not None and current[0] == ts and not current[1]:
            continue  # the upsert half of a split update at this commitTs stands
        final[delete_key] = (ts, True, delete_image)
    return [NetChange(deleted, image) for _, deleted, image in final.values()], born is not None
