"""What every room of apply/ stands on: the job's own Spark SQL session (`session`: forks, commit tags, retried
conflicts, the write guard), Spark's error conditions (`errors`), upstream names quoted for SQL and paths
(`identifiers`), and the seconds a batch spends per phase (`phases`).

Imports nothing of apply/.
"""
