"""``python -m custom_op.prepare``: runs the command line (custom_op/prepare/cli.py)."""

import sys

from custom_op.prepare.cli import main

sys.exit(main())
