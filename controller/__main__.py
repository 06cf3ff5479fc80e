"""`python -m controller` is the `longrun` CLI."""

import sys

from controller.cli import main

sys.exit(main())
