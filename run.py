"""fedbench entry point: ``python run.py [overrides]`` or ``python run.py -m <sweep overrides>``."""

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parent / "src")
sys.path.insert(0, SRC)
# launcher workers (joblib, submitit, Ray) are new processes: they import fedbench from the same place
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)

from fedbench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
