"""`python -m cli`: the same as the installed `kmon` script."""

import sys

from cli.main import main

sys.exit(main())
