"""``python -m skbnngp compare ...``: the same as the ``skbnngp`` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
