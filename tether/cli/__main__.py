"""``python -m tether.cli`` runs the ``tether`` command."""

import sys

from tether.cli import main

sys.exit(main())
