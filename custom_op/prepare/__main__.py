"""``python -m custom_op.prepare``: runs the command line (custom_op/prepare/cli.py)."""

import sys

from custom_op.prepare.cli import main

if __name__ == "__main__":
    sys.exit(main())
