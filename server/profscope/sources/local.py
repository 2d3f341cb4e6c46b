"""Local disk source. Symbolic links are followed only while they stay under the root.

The root is a folder, or one file (served as a run of its own). A folder that does not exist yet is not an
error when the server starts: it is listed again at every rescan (``profscope serve ./log`` before training
writes ``./log``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from profscope.sources.base import ObjectInfo, SourceError


class LocalSource:
    """Lists every file under the root, except hidden folders (``.git``, ``.cache``) and ``exclude``; a file
    as the root lists that file alone (its key is its name, under its folder)."""

    def __init__(self, root: str | Path, exclude: list[Path] | None = None) -> None:
        path = Path(root).expanduser().resolve()
        self.uri = str(path)
        self.only = path.name if path.is_file() else None  # a single trace file given as the root
        self.root = path.parent if self.only else path
        self.exclude = {Path(p).expanduser().resolve() for p in exclude or []}

    def _inside(self, path: Path) -> bool:
        try:
            path.resolve().relative_to(self.root)
        except (ValueError, OSError):
            return False
        return True

    def list(self) -> list[ObjectInfo]:
        if self.only is not None:
            return [self.stat(self.only)]
        if not self.root.is_dir():
            missing = not self.root.exists()
            raise SourceError(f"{self.root} does not exist (yet)" if missing else f"{self.root} is not a folder")
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
        beside_the_file = self.only is not None and key != self.only
        if beside_the_file or not self._inside(path) or ".." in Path(key).parts or Path(key).is_absolute():
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
