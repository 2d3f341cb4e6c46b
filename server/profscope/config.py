"""Settings: command-line flags, each also readable from a ``PROFSCOPE_*`` environment variable."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from profscope.sources.base import StorageOptions


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "profscope"


@dataclass
class Settings:
    roots: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8080
    cache_dir: Path = field(default_factory=default_cache_dir)  # the local cache: entries memory-mapped from here
    shared_cache: str | None = None  # s3://, gs://, az:// URI of a cache shared by replicas (shared_cache.py)
    shared_cache_write: bool = False  # publish what this server parses to the shared cache
    workers: int = max(1, min(4, (os.cpu_count() or 2)))
    rescan_seconds: float = 10.0
    cache_max_bytes: int = 20 << 30  # beyond it, least recently used entries no served run needs are evicted
    max_trace_bytes: int = 64 << 30
    max_snapshot_bytes: int = 8 << 30
    max_parse_seconds: float = 3600.0  # a parse still running after this is stopped (its worker killed)
    worker_memory_bytes: int = 0  # address space of each parser process (RLIMIT_AS); 0: no cap
    cores_per_parse: int = 2  # processes one parse may use when it is the only one; 1: the lowest peak memory
    source_roots: list[Path] = field(default_factory=list)  # where jump-to-source may read files
    source_link_template: str = ""  # e.g. vscode://file/{path}:{line} or https://host/blob/{rev}/{relpath}#L{line}
    source_path_map: list[tuple[str, str]] = field(default_factory=list)  # (trace prefix, repo prefix)
    source_revision: str = "main"
    eager_ingest: bool = True
    storage: StorageOptions = field(default_factory=StorageOptions)  # endpoints, timeouts, retries
    log_format: str = "text"  # text | json (one JSON object per line)
    auth_token: str = field(default="", repr=False)  # when set: requests need it (bearer or login cookie)
    trust_proxy_header: str = ""  # e.g. X-Forwarded-User: requests without it are refused
    public_metrics: bool = False  # /metrics open even when access control is on
    # docs/security.md: which Host headers are answered (empty: any), who may set the proxy header
    allowed_hosts: list[str] = field(default_factory=list)
    trusted_proxies: list[str] = field(default_factory=list)  # CIDRs; none given: loopback only
    proxy_secret: str = field(default="", repr=False)  # the proxy sends it in PROXY_SECRET_HEADER
    header_timeout_s: float = 30.0  # a request's headers must arrive within this
    max_connections: int = 1000
    max_summary_work: int = 300_000_000  # slices x tracks of one Trace-view area summary (api/timeline.py)

    @property
    def access_control(self) -> bool:
        return bool(self.auth_token or self.trust_proxy_header)

    @property
    def traces_cache(self) -> Path:
        return Path(self.cache_dir) / "traces"


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"PROFSCOPE_{name}", default)


def env_flag(name: str) -> bool:
    return (env(name) or "").strip().lower() in ("1", "true", "yes", "on")


MIN_TOKEN_LENGTH = 16  # an --auth-token shorter than this is refused


def access_settings_problems(settings: Settings) -> tuple[list[str], list[str]]:
    """(errors that stop the server, warnings to log) about the access-control flags (here, not in auth.py:
    serve checks them before it imports the web framework, which auth.py needs)."""
    errors, warnings = [], []
    if settings.auth_token and len(settings.auth_token) < MIN_TOKEN_LENGTH:
        errors.append(f"--auth-token must be at least {MIN_TOKEN_LENGTH} characters (e.g. `openssl rand -hex 24`)")
    for cidr in settings.trusted_proxies:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            errors.append(f"--trusted-proxy {cidr!r} is not an address or CIDR (10.0.0.0/8, 2001:db8::/32)")
    if settings.trust_proxy_header and not (settings.trusted_proxies or settings.proxy_secret):
        warnings.append(
            f"--trust-proxy-header {settings.trust_proxy_header} is believed from loopback addresses only "
            "(a sidecar proxy): name a proxy elsewhere with --trusted-proxy CIDR or set --proxy-secret"
        )
    if any(ipaddress.ip_network(c, strict=False).prefixlen == 0 for c in settings.trusted_proxies if not errors):
        warnings.append("--trusted-proxy covers every address: any client can set the proxy header")
    return errors, warnings


LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def default_allowed_hosts(bind_host: str) -> list[str]:
    """The hosts a browser names when the server listens on a loopback address; every host otherwise.

    Any port: an SSH tunnel (``ssh -L 9000:127.0.0.1:8080``) or a container's published port make the
    browser name another one, and a DNS-rebinding page changes the name, not the port."""
    if bind_host not in ("127.0.0.1", "localhost", "::1"):
        return ["*"]
    return list(LOCAL_HOSTS)
