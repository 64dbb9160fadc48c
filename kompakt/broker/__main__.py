"""`python -m kompakt.broker [serve options]`: the same as `kompakt serve`."""
import sys

from kompakt.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
