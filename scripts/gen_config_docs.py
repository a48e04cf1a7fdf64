"""Rewrite docs/config.md from the configuration's pydantic fields (see incsync/config/docs.py)."""

from pathlib import Path

from incsync.config.docs import render

target = Path(__file__).resolve().parents[1] / "docs" / "config.md"
target.write_text(render())
print(f"wrote {target}")
