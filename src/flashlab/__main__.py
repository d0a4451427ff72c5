"""``python -m flashlab COMMAND``: the ``flashlab`` command (:mod:`flashlab.cli`)."""
import sys

from flashlab.cli import main

sys.exit(main())
