"""Does a report fit a laptop window? Each HTML report is loaded in headless Chromium at WIDTH×900 and
the page's scroll width is printed (a page wider than the window scrolls sideways); a screenshot of the
first screen is written beside the table.

Run: python scripts/check_report_width.py REPORT.html [...] [--width 1280] [--shots DIR] (screenshots go to
DIR, by default report-shots/ in the current folder, one per report).
Needs Chromium (Debian: apt-get install chromium). Exit status 1 when a report is wider than the window.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = "<script>document.title = 'scrollWidth=' + document.documentElement.scrollWidth;</script>"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("no Chromium found; install it (Debian: apt-get install chromium)")


def scroll_width(browser: str, report: Path, width: int, shot: Path) -> int:
    """The page's scroll width in CSS pixels at a window `width` wide; writes a screenshot to `shot`."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / "report.html"
        probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
        common = [browser, *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},900"]
        dom = subprocess.run([*common, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
        subprocess.run([*common, f"--screenshot={shot}", probed.as_uri()], capture_output=True, timeout=120)
    found = re.search(r"scrollWidth=(\d+)", dom.stdout)
    if found is None:
        sys.exit(f"{report}: Chromium printed no page ({dom.stderr.strip().splitlines()[-1:]})")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--shots", type=Path, default=Path("report-shots"),
                        help="folder for the screenshots (default: report-shots/ here)")
    args = parser.parse_args()
    browser, wider = chromium(), 0
    args.shots.mkdir(parents=True, exist_ok=True)
    print(f"| report | scroll width at a {args.width}-pixel window | fits |\n|---|---|---|")
    for number, report in enumerate(args.reports):
        width = scroll_width(browser, report, args.width, args.shots / f"{number}-{report.parent.name}.png")
        wider += width > args.width
        print(f"| {report} | {width} px | {'yes' if width <= args.width else 'no'} |")
    print(f"\nscreenshots: {args.shots}")
    sys.exit(1 if wider else 0)


if __name__ == "__main__":
    main()
