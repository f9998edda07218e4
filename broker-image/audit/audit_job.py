"""`brokergroup audit` as a spark-submit application (docs/audit.md "On a Spark cluster"):
`spark-submit … local:///app/audit_job.py STORE_ROOT [--out …] --master <the same URL>`."""

import sys

from brokergroup_cli.main import main

if __name__ == "__main__":
    sys.exit(main(["audit", *sys.argv[1:]]))
