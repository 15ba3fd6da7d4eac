"""``python -m fabric_jax`` runs the command line (:func:`fabric_jax.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
