"""Render a report page in a headless browser (Debian's chromium) to check it as a person would see it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 3200, timeout: float = 60.0) -> Path:
    """Screenshot `page` at width x height CSS pixels, offline (no network at all)."""
    browser = find_browser()
    if browser is None:
        raise FileNotFoundError("no chromium found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-extensions", "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--window-size={width},{height}", f"--screenshot={Path(png).resolve()}",
               Path(page).resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not Path(png).is_file():
        raise RuntimeError(f"{browser} wrote no screenshot (exit {proc.returncode}): {proc.stderr[-300:]}")
    return Path(png)
