"""spark-submit's primary resource, inside the wheel: runs the `ticdc-delta` command line in spark-submit's driver.

    spark-submit [Spark and Delta options] "$(python -m ticdc_delta.jobs.spark_submit --path)" run --config job.toml

The product (the ticdc-delta wheel, without the `local` extra) is installed in the Python that
spark-submit's driver runs; `--path` prints this file's location in that installation. The job uses
spark-submit's session as it is; the Delta settings come from the spark-submit command line.
"""

import sys

from ticdc_delta.jobs.cli import main

if __name__ == "__main__":
    if sys.argv[1:] == ["--path"]:
        print(__file__)
    else:
        main()  # raises SystemExit with the command's status: spark-submit's driver exits with it
