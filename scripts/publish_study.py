"""Copy a finished study folder into results/ without its checkpoints, so the committed folder can be judged again.

    python scripts/publish_study.py runs/sorting-cpu results/sorting-cpu

Everything the study wrote is copied (report, summary.json, CSVs, figures) together with its run store's small files
(each ensemble's config.json, metrics.parquet and summary.json) and its analysis caches; checkpoints, resume states
and locks stay behind. The same `headway study ... --out results/NAME` command then re-summarises and re-judges the
committed folder without training (its runs are finished and their analyses cached), as long as no rule read
while analysing changed. The destination's earlier outputs are replaced; its README.template.md and README.md stay.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

LEFT_BEHIND = {"checkpoints", "resume", ".lock"}  # too large to commit, or only meaningful while training
KEPT = {"README.md", "README.template.md"}  # the destination's own


def publish(source: Path, destination: Path) -> list[Path]:
    """Replace `destination`'s study outputs with `source`'s (module docstring); the files written, sorted."""
    if not (source / "summary.json").is_file():
        raise SystemExit(f"error: {source} holds no summary.json: is it a finished study folder?")
    destination.mkdir(parents=True, exist_ok=True)
    for old in destination.iterdir():
        if old.name not in KEPT:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    written = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or LEFT_BEHIND & set(relative.parts) or relative.name in KEPT:
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the finished study folder (e.g. runs/sorting-cpu)")
    parser.add_argument("destination", type=Path, help="its folder under results/")
    args = parser.parse_args(argv)
    written = publish(args.source, args.destination)
    print(f"{len(written)} files into {args.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
