"""Ordering gate, per-table collapse, MERGE / DDL into Delta, checkpoints.

Knows typed events only: no bytes, no protocol names.
"""
