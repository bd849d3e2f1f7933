"""spark-submit's primary resource: runs the `ticdc-delta` command line in spark-submit's driver.

The product (the ticdc-delta wheel, without the `local` extra) is installed in the Python that
spark-submit's driver runs. The job then uses spark-submit's session as it is; the Delta settings
come from the spark-submit command line (see the README's "spark-submit" section).
"""

import sys

from jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
