"""``python -m epochtrain``: the same as the ``epochtrain`` command."""

import sys

from epochtrain.cli import main

sys.exit(main())
