"""`python -m kompakt ...`: the same as the `kompakt` command (kompakt/cli.py)."""
import sys

from kompakt.cli import main

sys.exit(main())
