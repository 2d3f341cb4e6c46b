"""Where the web assets are: inside the installed package, or ``web/`` of a source checkout."""

from __future__ import annotations

from pathlib import Path


def web_dir() -> Path:
    packaged = Path(__file__).resolve().parent / "web"
    if (packaged / "templates").is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "web"
    if (checkout / "templates").is_dir():
        return checkout
    raise FileNotFoundError("profscope's web assets (templates, static) are missing from this installation")


def demo_traces() -> Path:
    return Path(__file__).resolve().parent / "demo" / "traces"
