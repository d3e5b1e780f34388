"""``python -m kvlib`` runs the command line."""
import sys

from .report.cli import main

sys.exit(main())
