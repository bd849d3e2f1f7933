"""Who writes a data table, and how: Spark's MERGE, CREATE, ALTER and rewrites (`delta_writer`, with `evolution`
planning a structure change), delta-rs's small MERGEs where they are Spark's exactly (`delta_rs`,
`delta_rs_keys`), and a pool of sessions for tables merged at once (`table_pool`).

Imports `apply.places`, `apply.changes`, `apply.tables` and `apply.base` only (the own tables reach it through
`apply.places`).
"""
