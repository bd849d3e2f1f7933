"""Where each table is: path folders or catalog names (`locator`), path tables' folders kept in the table registry
(`folders`, `registry`: a RENAME or DROP moves no folder), and which upstream tables are materialized under which
names (`routing`, the `[[tables]]` rules).

Imports `apply.own_tables`, `apply.tables` and `apply.base` only.
"""
