"""fedbench entry point: ``python run.py [overrides]`` or ``python run.py -m <sweep overrides>``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from fedbench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
