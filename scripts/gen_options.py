"""Rewrite ``docs/reference/options.md`` from the Config dataclasses (``fedbench.config.reference``)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbench.config.reference import options_markdown  # noqa: E402

if __name__ == "__main__":
    out = ROOT / "docs" / "reference" / "options.md"
    out.write_text(options_markdown())
    print(f"wrote {out}")
