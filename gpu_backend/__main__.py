"""python -m gpu_backend ... (see gpu_backend/cli.py)."""

import sys

from gpu_backend.cli import main

if __name__ == "__main__":
    sys.exit(main())
