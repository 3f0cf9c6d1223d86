"""``python -m pgmem.cli``: the ``pgmem`` command."""

import sys

from pgmem.cli.app import main

sys.exit(main())
