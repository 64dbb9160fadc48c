import sys

from kompakt.cli import main

sys.exit(main())
