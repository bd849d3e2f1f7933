"""A Delta table as the product reads and marks it, whoever writes it: applied points (`points`, the values
decisions are made with) and the markers its commits carry (`markers`), the layouts `compatible` and `full`
(`features`), and delta-rs as every writer uses it (`delta_rs_base`: availability, local paths, conflicts;
`delta_rs_checks`: what it writes exactly as Spark would; `arrow_types`).

Imports `apply.base` only.
"""
