"""The changes of one table between two applied points, as one MERGE takes them: the net change per key
(`collapse`), a table's run of changes in memory or staged (`table_changes`), the MERGE source (`merge_source`),
and the rows and columns of history tables (`history`).

Imports `apply.tables` and `apply.base` only; pure (no Spark, Delta or Kafka client).
"""
