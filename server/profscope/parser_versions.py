"""The version of each parser's output, part of every cache key (``catalog.TraceFile.cache_key``).

Bump one when what that parser writes (tables, their columns, their meaning) changes: every cached
entry of that kind of file is then parsed again. A change of a query's result bumps the query's own
version instead (``analysis/payloads.py``), which recomputes that result alone. Kept in this leaf
module so the catalog, below the parsers, reads them without importing a parser.
"""

TRACE = 3  # ingest/kineto.py
PADDLE = 2  # ingest/paddle.py (a Paddle-named trace's key holds TRACE and PADDLE)
SNAPSHOT = 2  # ingest/snapshot.py
MEMORY_LOG = 1  # ingest/memory_log.py
NSYS = 1  # ingest/nsys.py
