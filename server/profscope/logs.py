"""Logging: readable text or one JSON object per line, with secrets scrubbed from every record.

``--log-format json`` (``PROFSCOPE_LOG_FORMAT=json``) is for log collectors: every line is a JSON
object with ``ts``, ``level``, ``logger``, ``message`` and the record's structured fields (the
access log adds ``method``, ``route``, ``path``, ``status``, ``duration_ms``, ``user``). The access
log never records headers, cookies or query strings, and any configured secret (the auth token) or
SAS signature / account key that reaches a message anyway is replaced by ``***``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable

ACCESS_LOGGER = "profscope.access"
_STANDARD_ATTRS = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of the message with terminal colours
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message``; access lines spell out their fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


class RedactSecrets(logging.Filter):
    """Replace every configured secret in a record's message and arguments with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        from profscope.sources.base import redact

        message = record.getMessage()
        cleaned = redact(message, tuple(self.secrets))  # also SAS signatures and account keys in URLs
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:  # the traceback's text is what a handler prints
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), tuple(self.secrets))
        return True


def configure_logging(level: str = "info", fmt: str = "text", secrets: Iterable[str] = ()) -> None:
    """Send every logger (profscope's, uvicorn's) to stderr in the chosen format."""
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}: use text or json")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RedactSecrets(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # profscope.access logs each request instead
    if level.lower() != "debug":  # the storage SDKs log every request at INFO
        for noisy in ("azure", "botocore", "boto3", "urllib3", "google"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
