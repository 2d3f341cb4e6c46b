"""Local disk source. Symbolic links are followed only while they stay under the root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from profscope.sources.base import ObjectInfo, SourceError


class LocalSource:
    """Lists every file under the root, except hidden folders (``.git``, ``.cache``) and ``exclude``."""

    def __init__(self, root: str | Path, exclude: list[Path] | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)
        self.exclude = {Path(p).expanduser().resolve() for p in exclude or []}
        if not self.root.is_dir():
            raise SourceError(f"{self.root} is not a directory")

    def _inside(self, path: Path) -> bool:
        try:
            path.resolve().relative_to(self.root)
        except (ValueError, OSError):
            return False
        return True

    def list(self) -> list[ObjectInfo]:
        found: list[ObjectInfo] = []
        pending = [self.root]
        seen_dirs = {self.root}  # a link back to the root must not list it twice
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                path = Path(entry.path)
                if entry.is_symlink() and not self._inside(path):
                    continue
                try:
                    if entry.is_dir():
                        real = path.resolve()
                        if entry.name.startswith(".") or real in self.exclude:
                            continue
                        if real not in seen_dirs:
                            seen_dirs.add(real)
                            pending.append(path)
                    elif entry.is_file():
                        stat = entry.stat()
                        key = path.relative_to(self.root).as_posix()
                        found.append(
                            ObjectInfo(key=key, size=stat.st_size, version=f"{stat.st_mtime_ns}-{stat.st_size}")
                        )
                except OSError:
                    continue
        return sorted(found, key=lambda o: o.key)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not self._inside(path) or ".." in Path(key).parts or Path(key).is_absolute():
            raise SourceError(f"{key!r} is outside the root {self.root}")
        return path

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            stat = path.stat()
        except OSError as exc:
            raise SourceError(f"cannot read {key}: {exc.strerror}") from exc
        return ObjectInfo(key=key, size=stat.st_size, version=f"{stat.st_mtime_ns}-{stat.st_size}")

    def open(self, key: str) -> IO[bytes]:
        path = self._path(key)  # outside the try: its refusal says why, not "cannot open ...: None"
        try:
            return open(path, "rb")
        except OSError as exc:
            raise SourceError(f"cannot open {key}: {exc.strerror}") from exc
