"""Command line: ``profscope serve [ROOT ...]``, ``profscope index ROOT`` and ``profscope ingest FILE ...``."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from profscope import __version__
from profscope.cache_bounds import DEFAULT_CACHE_MAX_BYTES
from profscope.config import (
    Settings,
    access_settings_problems,
    default_allowed_hosts,
    default_cache_dir,
    env,
    env_flag,
)
from profscope.logs import configure_logging
from profscope.sources.base import StorageOptions, redact

if TYPE_CHECKING:
    from profscope.catalog import TraceFile
    from profscope.sources import Source
    from profscope.state import Profscope


def _int_env(name: str, default: int) -> int:
    value = env(name)
    return int(value) if value else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="profscope", description="A dashboard for PyTorch profiler traces.")
    parser.add_argument("--version", action="version", version=f"profscope {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="serve the dashboard for every run under the given roots",
        description="Serve the dashboard for every run found under the given roots. Every flag can also be set "
        "with an environment variable PROFSCOPE_<FLAG> (e.g. PROFSCOPE_PORT=9000).",
    )
    serve.add_argument(
        "roots",
        nargs="*",
        metavar="ROOT",
        help="folders or buckets of traces to serve (searched recursively): a path, s3://BUCKET/PREFIX, "
        "gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX; "
        "with none, PROFSCOPE_ROOTS (comma-separated); with neither, the built-in demo run is served",
    )
    serve.add_argument(
        "--host",
        default=env("HOST", "127.0.0.1"),
        help="address to listen on (default 127.0.0.1; use 0.0.0.0 in a container)",
    )
    serve.add_argument("--port", type=int, default=_int_env("PORT", 8080), help="port to listen on (default 8080)")
    serve.add_argument(
        "--cache-dir",
        default=env("CACHE_DIR") or str(default_cache_dir()),
        metavar="DIR|URI",
        help="where parsed traces are cached; a restarted server reuses it (default ~/.cache/profscope). An "
        "s3://, gs:// or az:// URI names a cache in object storage shared by several servers (see "
        "`profscope index`): traces found there are downloaded instead of parsed",
    )
    serve.add_argument(
        "--local-cache-dir",
        default=env("LOCAL_CACHE_DIR") or None,
        metavar="DIR",
        help="with a --cache-dir URI: the local disk where entries are unpacked and read (default ~/.cache/profscope)",
    )
    serve.add_argument(
        "--shared-cache-write",
        action="store_true",
        default=env_flag("SHARED_CACHE_WRITE"),
        help="with a --cache-dir URI: upload what this server parses (and parse failures), for the other servers",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=_int_env("WORKERS", Settings().workers),
        help="number of worker processes that parse traces (default: CPU count, at most 4)",
    )
    serve.add_argument(
        "--cores-per-parse",
        type=int,
        choices=(1, 2),
        default=_int_env("CORES_PER_PARSE", Settings().cores_per_parse),
        help="processes one parse may use when it is the only one, to decode the file and compute its views: 2 "
        "(default) is faster, 1 has the lowest peak memory (bench/RESULTS.md, run 13)",
    )
    serve.add_argument(
        "--rescan-seconds",
        type=float,
        default=float(env("RESCAN_SECONDS") or 10.0),
        help="how often the roots are listed again to find new or changed files (default 10)",
    )
    serve.add_argument(
        "--cache-max-bytes",
        type=int,
        default=_int_env("CACHE_MAX_BYTES", DEFAULT_CACHE_MAX_BYTES),
        help="bound the local cache: beyond this many bytes, the least recently used entries that no served run "
        "needs are removed (entries of deleted or overwritten files always are); 0: no bound (default 20 GiB)",
    )
    _add_limit_arguments(serve)
    serve.add_argument(
        "--max-parse-seconds",
        type=float,
        default=float(env("MAX_PARSE_SECONDS") or 3600.0),
        help="stop a parse still running after this many seconds and mark its file failed (default 3600)",
    )
    serve.add_argument(
        "--worker-memory-bytes",
        type=int,
        default=_int_env("WORKER_MEMORY_BYTES", 0),
        help="cap each parser process's address space (RLIMIT_AS); a parse needing more fails (default: no cap)",
    )
    serve.add_argument(
        "--source-root",
        action="append",
        type=Path,
        default=None,
        help="folder whose files the jump-to-source viewer may show (repeatable)",
    )
    serve.add_argument(
        "--source-link",
        default=env("SOURCE_LINK", ""),
        help="extra link for stack frames, e.g. 'vscode://file/{path}:{line}' or "
        "'https://github.com/ORG/REPO/blob/{rev}/{relpath}#L{line}'",
    )
    serve.add_argument(
        "--source-path-map",
        action="append",
        default=None,
        metavar="PREFIX=REPLACEMENT",
        help="rewrite a frame path prefix to a repository path for {relpath} (repeatable; "
        "PROFSCOPE_SOURCE_PATH_MAP takes a comma-separated list)",
    )
    serve.add_argument("--source-rev", default=env("SOURCE_REV", "main"), help="{rev} in --source-link (default main)")
    serve.add_argument("--log-level", default=env("LOG_LEVEL", "info"), help="debug, info, warning or error")
    _add_storage_arguments(serve)
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=env("LOG_FORMAT", "text"),
        help="text (default) or json: one JSON object per line, one line per request with route, status, duration",
    )
    serve.add_argument(
        "--auth-token",
        default=env("AUTH_TOKEN", ""),
        help="require this token (Authorization: Bearer, or pasted once into /login for a browser cookie); "
        "prefer the environment variable PROFSCOPE_AUTH_TOKEN, which process listings do not show",
    )
    serve.add_argument(
        "--trust-proxy-header",
        default=env("TRUST_PROXY_HEADER", ""),
        metavar="HEADER",
        help="e.g. X-Forwarded-User: an authenticating proxy in front sets it, requests without it are refused",
    )
    serve.add_argument(
        "--public-metrics",
        action="store_true",
        default=env_flag("PUBLIC_METRICS"),
        help="leave /metrics open when access control is on (it holds counts, no trace data)",
    )
    _add_security_arguments(serve)

    indexer = commands.add_parser(
        "index",
        help="parse every trace under a root into a cache directory that servers then share",
        description="Parse every trace under ROOT (or the shard --shard I/N of them, by a hash of the object key) "
        "into --cache-dir, so that `profscope serve ROOT --cache-dir DIR` serves them without parsing. Name ROOT "
        "exactly as the servers do: cache entries are keyed by the root, the object, its version and the parser.",
    )
    indexer.add_argument("root", metavar="ROOT", help="folder or bucket URI, as the servers name it")
    indexer.add_argument(
        "--cache-dir",
        default=env("CACHE_DIR") or str(default_cache_dir()),
        metavar="DIR|URI",
        help="the cache the servers use: a directory on a shared volume, or an s3://, gs:// or az:// URI",
    )
    indexer.add_argument(
        "--local-cache-dir",
        default=env("LOCAL_CACHE_DIR") or None,
        metavar="DIR",
        help="with a --cache-dir URI: where each trace is parsed before its upload (default: a temporary "
        "directory; every entry is removed once uploaded)",
    )
    indexer.add_argument(
        "--shard",
        default=env("SHARD") or _indexed_job_shard(),
        metavar="I/N",
        help="parse only shard I of N (0 <= I < N); default: JOB_COMPLETION_INDEX/PROFSCOPE_SHARD_COUNT inside a "
        "Kubernetes Indexed Job, else everything",
    )
    _add_limit_arguments(indexer)
    _add_storage_arguments(indexer)

    ingest = commands.add_parser(
        "ingest",
        help="parse trace, allocator snapshot or memory.log files and compute every view, printing timings",
        description="Parse files (traces, allocator snapshots, memory.log) in this process and compute every "
        "cached query, as a worker would.",
    )
    ingest.add_argument("files", nargs="+", type=Path)
    ingest.add_argument("--cache-dir", type=Path, default=None, help="write the cache here (default: a temp dir)")
    return parser


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-trace-bytes",
        type=int,
        default=_int_env("MAX_TRACE_BYTES", 64 << 30),
        help="refuse traces whose decompressed size exceeds this many bytes (default 64 GiB)",
    )
    parser.add_argument(
        "--max-snapshot-bytes",
        type=int,
        default=_int_env("MAX_SNAPSHOT_BYTES", 8 << 30),
        help="refuse allocator snapshots (pickles) whose decoded data would take more than this many bytes of "
        "memory (default 8 GiB)",
    )


def _comma_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of docs/security.md: allowed hosts, the trusted proxy, connection limits."""
    group = parser.add_argument_group("request checks", "see docs/security.md")
    group.add_argument(
        "--allowed-host", dest="allowed_hosts", action="append", metavar="HOST[:PORT]",
        default=_comma_list(env("ALLOWED_HOSTS")),
        help="answer requests whose Host header is this (repeatable; '*' any, '*.example.com' a domain; env "
        "PROFSCOPE_ALLOWED_HOSTS, comma-separated). Default: with a loopback --host, 127.0.0.1, localhost and "
        "[::1] on any port (a DNS-rebinding page cannot read local traces); otherwise any",
    )  # fmt: skip
    group.add_argument(
        "--trusted-proxy", dest="trusted_proxies", action="append", metavar="CIDR",
        default=_comma_list(env("TRUSTED_PROXIES")),
        help="address(es) of the proxy allowed to set --trust-proxy-header and X-Forwarded-Proto (repeatable; "
        "default: loopback only, with a warning)",
    )  # fmt: skip
    group.add_argument(
        "--proxy-secret", default=env("PROXY_SECRET", ""), metavar="SECRET",
        help="a proxy that sends 'X-Profscope-Proxy-Secret: SECRET' is trusted from any address (prefer the "
        "environment variable PROFSCOPE_PROXY_SECRET)",
    )  # fmt: skip
    group.add_argument(
        "--header-timeout", type=float, default=float(env("HEADER_TIMEOUT") or 30.0), metavar="SECONDS",
        help="close a connection whose request headers are not complete after this long (default 30)",
    )  # fmt: skip
    group.add_argument(
        "--max-connections", type=int, default=_int_env("MAX_CONNECTIONS", 1000),
        help="close new connections beyond this many open ones (default 1000)",
    )  # fmt: skip
    group.add_argument(
        "--max-summary-work", type=int, default=_int_env("MAX_SUMMARY_WORK", Settings().max_summary_work),
        metavar="N", help="refuse a Trace-view area summary over more than N slices x tracks (default 3x10^8, "
        "a few seconds of one core); such a request answers 400 asking for fewer tracks or a shorter range",
    )  # fmt: skip


def _add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    storage = parser.add_argument_group("object storage", "s3://, gs://, az:// and https://ACCOUNT.blob... roots")
    storage.add_argument(
        "--s3-endpoint-url",
        default=env("S3_ENDPOINT_URL") or None,
        help="S3-compatible endpoint (MinIO, Ceph, R2...), e.g. http://minio:9000; default: AWS_ENDPOINT_URL, else AWS",
    )
    storage.add_argument(
        "--azure-account-url",
        default=env("AZURE_ACCOUNT_URL") or None,
        help="Blob endpoint replacing https://ACCOUNT.blob.core.windows.net (Azurite, sovereign clouds)",
    )
    storage.add_argument(
        "--storage-timeout",
        type=float,
        default=float(env("STORAGE_TIMEOUT") or 20.0),
        help="seconds to wait for a connection or for one read from object storage (default 20)",
    )
    storage.add_argument(
        "--storage-attempts",
        type=int,
        default=_int_env("STORAGE_ATTEMPTS", 5),
        help="tries per storage request on throttling, 5xx and connection errors, with exponential backoff (default 5)",
    )


def _storage_options(args: argparse.Namespace) -> StorageOptions:
    return StorageOptions(
        s3_endpoint_url=args.s3_endpoint_url,
        azure_account_url=args.azure_account_url,
        timeout_s=args.storage_timeout,
        attempts=max(1, args.storage_attempts),
    )


def _indexed_job_shard() -> str | None:
    """``I/N`` from a Kubernetes Indexed Job (JOB_COMPLETION_INDEX) and PROFSCOPE_SHARD_COUNT."""
    index, count = os.environ.get("JOB_COMPLETION_INDEX"), env("SHARD_COUNT")
    return f"{index}/{count}" if index is not None and count else None


def _cache_locations(args: argparse.Namespace, roots: list[str]) -> tuple[Path | None, str | None]:
    """(local cache directory, shared cache URI) from --cache-dir and --local-cache-dir; ValueError if they clash.

    With a URI, the local directory is --local-cache-dir (None when not given)."""
    from profscope.sources import is_object_store_uri
    from profscope.sources.base import is_hidden

    if not is_object_store_uri(args.cache_dir):
        if args.local_cache_dir:
            raise ValueError("--local-cache-dir is for a --cache-dir in object storage (s3://, gs://, az://)")
        if getattr(args, "shared_cache_write", False):
            raise ValueError("--shared-cache-write needs a --cache-dir in object storage (s3://, gs://, az://)")
        return Path(args.cache_dir.removeprefix("file://")), None
    from profscope.sources import SourceError, open_source, open_store

    try:
        cache = open_store(args.cache_dir).uri
        for root in roots:
            source = open_source(root) if is_object_store_uri(root) else None
            inside = source is not None and f"{cache}/".startswith(f"{source.uri}/")
            if inside and not is_hidden(f"{cache}/".removeprefix(f"{source.uri}/")):
                raise ValueError(
                    f"the cache {cache} is inside the root {source.uri}, whose listing would show its files: "
                    f"put it elsewhere, or in a folder whose name starts with '.' ({source.uri}/.profscope-cache)"
                )
    except SourceError as exc:
        raise ValueError(f"--cache-dir: {exc}") from None
    return (Path(args.local_cache_dir) if args.local_cache_dir else None), args.cache_dir


def _absolute(root: str) -> str:
    """A local root as an absolute path, read from the directory profscope was started in (as shown and logged)."""
    from profscope.sources import is_object_store_uri

    if is_object_store_uri(root):
        return root
    return str(Path(root.removeprefix("file://")).expanduser().resolve())


def _settings_from(args: argparse.Namespace) -> Settings:
    from profscope.assets import demo_traces

    env_roots = [r.strip() for r in (env("ROOTS") or "").split(",") if r.strip()]
    roots = [_absolute(root) for root in args.roots or env_roots or [str(demo_traces())]]
    source_roots = args.source_root or [Path(p) for p in (env("SOURCE_ROOT") or "").split(":") if p]
    path_items = args.source_path_map or [x for x in (env("SOURCE_PATH_MAP") or "").split(",") if x]
    path_map = [tuple(item.split("=", 1)) for item in path_items if "=" in item]
    local_cache, shared_cache = _cache_locations(args, roots)
    return Settings(
        roots=roots,
        host=args.host,
        port=args.port,
        cache_dir=local_cache or default_cache_dir(),
        shared_cache=shared_cache,
        shared_cache_write=args.shared_cache_write,
        workers=max(1, args.workers),
        cores_per_parse=args.cores_per_parse,
        rescan_seconds=args.rescan_seconds,
        cache_max_bytes=max(0, args.cache_max_bytes),
        max_trace_bytes=args.max_trace_bytes,
        max_snapshot_bytes=args.max_snapshot_bytes,
        max_parse_seconds=args.max_parse_seconds,
        worker_memory_bytes=args.worker_memory_bytes,
        source_roots=source_roots,
        source_link_template=args.source_link,
        source_path_map=path_map,  # type: ignore[arg-type]
        source_revision=args.source_rev,
        log_format=args.log_format,
        auth_token=args.auth_token,
        trust_proxy_header=args.trust_proxy_header.strip(),
        public_metrics=args.public_metrics,
        allowed_hosts=args.allowed_hosts or default_allowed_hosts(args.host),
        trusted_proxies=args.trusted_proxies,
        proxy_secret=args.proxy_secret,
        header_timeout_s=args.header_timeout,
        max_connections=max(1, args.max_connections),
        max_summary_work=args.max_summary_work,
        storage=_storage_options(args),
    )


# Idle keep-alive connections are closed after this. Longer than the idle timeouts of the proxies and
# load balancers put in front (60 s for AWS ALB, nginx, oauth2-proxy): otherwise a proxy may reuse a
# connection just as profscope closes it and answer 502. uvicorn's default of 5 s did that to 1 request
# in ~40,000 in the load test (bench/RESULTS.md, Reliability).
KEEP_ALIVE_SECONDS = 75


class _Stopped(BaseException):
    """SIGINT or SIGTERM: before uvicorn runs (while the views are imported), or after its graceful shutdown
    (uvicorn raises the signal again once it is done). A BaseException, as KeyboardInterrupt is: no
    ``except Exception`` on the way takes it for an error."""


def _stop_on_signal(number: int, frame: object) -> None:
    raise _Stopped(number)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound (and listening: early connections wait in its backlog) before anything says
    "serving on"; OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, as getaddrinfo names it for uvicorn's own sockets: asyncio sets TCP_NODELAY only on a
    # connection whose socket says so. Without it, a response written in two parts (headers, then the body:
    # every file and every gzipped answer) waited for the client's delayed ACK, ~40 ms per request
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart while in TIME_WAIT
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(args: argparse.Namespace) -> int:
    from profscope.ingest.malloc_tuning import collection_paused, limit_heap_arenas

    try:
        settings = _settings_from(args)
    except ValueError as exc:
        print(f"profscope serve: {exc}", file=sys.stderr)
        return 2
    limit_heap_arenas()  # before uvicorn's and the ingest manager's threads exist
    errors, warnings = access_settings_problems(settings)
    if errors:
        print("profscope serve: " + "; ".join(errors), file=sys.stderr)
        return 2
    configure_logging(args.log_level, settings.log_format, secrets=[settings.auth_token, settings.proxy_secret])
    for warning in warnings:
        logging.getLogger("profscope").warning("%s", warning)
    # The parsers and every cached query's analysis are imported first; the parse workers are then forked
    # from this process, which has no other thread yet (jobs.prestart_workers), before it listens: they start
    # with all of it imported. The catalog is listed and the first parses handed to them before the web
    # framework and the views are imported (~1 s), which happens while they parse.
    with collection_paused():  # imports: the first parse waits for them
        from profscope.analysis.payloads import declared_queries
        from profscope.ingest.jobs import prestart_workers, stop_prestarted_workers
        from profscope.state import Profscope

        queries = declared_queries()
    prestart_workers(settings.workers, settings.worker_memory_bytes)
    # From here a SIGTERM or Ctrl+C stops the workers and exits 0, also while the views are still imported
    # (the forked workers keep the default handlers: the pool's terminate ends them at once)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _stop_on_signal)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack on stderr
    try:
        try:
            sock = _bind(settings.host, settings.port)
        except OSError as exc:
            print(f"profscope serve: cannot listen on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
            return 2
        state = Profscope(settings, queries=queries)  # takes the prestarted workers
        try:
            state.start()
            return _serve_app(args, settings, sock, state)
        finally:
            state.stop()  # also when the app never started (its lifespan stops it too: a second stop does nothing)
    except _Stopped:
        return 0
    finally:
        stop_prestarted_workers()  # the workers no manager took (the server stopped before it made one)


def _serve_app(args: argparse.Namespace, settings: Settings, sock: socket.socket, state: Profscope) -> int:
    from profscope.ingest.malloc_tuning import collection_paused

    with collection_paused():  # imports: they compete with the first parse for the CPU
        import uvicorn

        from profscope.app import create_app
        from profscope.http_protocol import guarded_protocol

        app = create_app(settings, started=state)
    access = []
    if settings.auth_token:
        access.append("token")
    if settings.trust_proxy_header:
        access.append(f"proxy header {settings.trust_proxy_header}")
    roots = ", ".join(redact(root) for root in settings.roots)  # a SAS token in a URL is a credential
    logging.getLogger("profscope").info(
        "profscope %s: serving %s on http://%s:%d (access control: %s)",
        __version__, roots, settings.host, settings.port, " or ".join(access) or "none",
    )  # fmt: skip
    if settings.shared_cache:
        logging.getLogger("profscope").info(
            "shared cache %s (%s), unpacked into %s", redact(settings.shared_cache),
            "read and written" if settings.shared_cache_write else "read only", settings.cache_dir,
        )  # fmt: skip
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=args.log_level.lower(), log_config=None,
        access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
        http=guarded_protocol(settings.header_timeout_s, settings.max_connections),
        proxy_headers=False,  # X-Forwarded-* is believed only from --trusted-proxy (auth.py), not from uvicorn
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])  # a signal ends it gracefully, then raises _Stopped
    return 0


def index(args: argparse.Namespace) -> int:
    from profscope.indexer import index_root, parse_shard

    configure_logging("info", env("LOG_FORMAT", "text") or "text")
    try:
        shard = parse_shard(args.shard) if args.shard else (0, 1)
        local_cache, shared_cache = _cache_locations(args, [args.root])
    except ValueError as exc:
        print(f"profscope index: {exc}", file=sys.stderr)
        return 2
    report = index_root(
        args.root, local_cache, shard=shard, max_trace_bytes=args.max_trace_bytes,
        max_snapshot_bytes=args.max_snapshot_bytes, storage=_storage_options(args), shared_cache=shared_cache,
    )  # fmt: skip
    print(json.dumps(report.to_json()), flush=True)
    for failure in report.failures:
        print(f"failed: {failure['file']}: {failure['message']}", file=sys.stderr)
    return 1 if report.failures else 0


def ingest(args: argparse.Namespace) -> int:
    import tempfile

    from profscope.ingest.jobs import IngestRequest, map_large_arrays_directly, run_ingest
    from profscope.sources import LocalSource
    from profscope.views.registry import queries

    map_large_arrays_directly()  # as the worker processes do
    unreadable = [f"{p}: {'not a file' if p.exists() else 'no such file'}" for p in args.files if not p.is_file()]
    if unreadable:
        print(f"profscope ingest: {'; '.join(unreadable)}", file=sys.stderr)
        return 2
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="profscope-ingest-"))
    failures = 0
    for path in args.files:
        started = time.perf_counter()
        source = LocalSource(path.resolve().parent)
        file = catalog_file(source, path.name, path.stat().st_size)
        if file is None or file.refusal:
            why = file.refusal if file is not None else "not a trace, allocator snapshot or memory.log"
            print(json.dumps({"file": str(path), "error": why}))
            failures += 1
            continue
        request = IngestRequest.for_file(file, source, cache_dir, queries(), 64 << 30, 64 << 30, f"cli-{path.name}")
        result = run_ingest(request)
        result["wall_s"] = time.perf_counter() - started
        failures += "error" in result
        print(json.dumps({"file": str(path), **{k: v for k, v in result.items() if k != "device_properties"}}))
    return 1 if failures else 0


def catalog_file(source: Source, key: str, size: int) -> TraceFile | None:
    """The catalog's reading of one file (its kind: trace, snapshot, memory.log), None when it reads none."""
    from profscope.catalog import build_runs
    from profscope.sources import ObjectInfo

    runs = build_runs([("cli", source.uri, [ObjectInfo(key=key, size=size, version=str(size))])])
    return next((file for run in runs.values() for file in run.files if file.key == key), None)


def main(argv: list[str] | None = None) -> int:
    # no BLAS call anywhere, but OpenBLAS starts a spinning thread per core in every process that imports
    # numpy (server, parse workers, their helpers): ~0.2 s of CPU each on a 2-core machine. Before numpy loads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "index":
        return index(args)
    return ingest(args)


if __name__ == "__main__":
    sys.exit(main())
