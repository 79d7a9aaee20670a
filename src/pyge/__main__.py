"""`python -m pyge ...` is the `pyge` command."""
import sys

from .cli import main

sys.exit(main())
