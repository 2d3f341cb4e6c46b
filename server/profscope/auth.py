"""Optional access control for a shared deployment (docs/security.md).

Two ways, either or both (then either one lets a request in):

- ``--auth-token T`` (``PROFSCOPE_AUTH_TOKEN``, at least 16 characters): a request carries
  ``Authorization: Bearer T`` (scripts, Prometheus), or the session cookie that ``/login`` sets after
  the token is pasted once into its form (browsers: the pages' own API calls then carry the cookie).
  A page request without credentials answers 401 with that form, so a pasted link works after one
  login. Each login gets its own session: a random id, an expiry and an HMAC keyed by the token
  (never the token); ``POST /logout`` revokes it, a new token revokes them all. The cookie is
  HttpOnly, SameSite=Lax, and Secure when the request came over HTTPS (directly, or as a trusted
  proxy's ``X-Forwarded-Proto``).
- ``--trust-proxy-header X-Forwarded-User``: an authenticating proxy in front (oauth2-proxy) sets
  the header. It is believed only from a trusted proxy: an address in ``--trusted-proxy`` (default
  loopback, for a sidecar), or a request carrying ``--proxy-secret`` in ``X-Profscope-Proxy-Secret``.
  A request without it (and without a valid token) is refused with 403.

A client address with many failed attempts (wrong bearer token, wrong login) in a minute gets 429
until the minute has passed (the address a trusted proxy names; loopback clients are not limited).
``/healthz`` and ``/readyz`` stay open for probes (answered in guard.py); ``/metrics`` too with
``--public-metrics``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import OrderedDict, deque
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from profscope.config import Settings
from profscope.guard import route_path

SESSION_COOKIE = "profscope_session"
SESSION_MAX_AGE_S = 7 * 24 * 3600
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/login", "/logout"})
MAX_LOGIN_FORM_BYTES = 16 << 10
PROXY_SECRET_HEADER = "x-profscope-proxy-secret"
LOOPBACK = ("127.0.0.0/8", "::1/128")
# Failed attempts per client address and minute before 429. A token of 16+ characters cannot be
# guessed at this rate; the limit stops a client from hammering the server (and its log).
FAILED_ATTEMPTS_PER_MINUTE = 100
TRACKED_ADDRESSES = 10_000  # the oldest are forgotten first: the table stays bounded


class Sessions:
    """Login sessions: ``id.expiry.mac`` cookies, checked without server state except the revoked ids."""

    def __init__(self, token: str) -> None:
        self.key = hmac.new(token.encode(), b"profscope-session-v2", hashlib.sha256).digest()
        self.revoked: dict[str, float] = {}  # session id -> its expiry (forgotten once expired)

    def issue(self) -> str:
        body = f"{secrets.token_urlsafe(18)}.{int(time.time()) + SESSION_MAX_AGE_S}"
        return f"{body}.{self._mac(body)}"

    def session_id(self, cookie: str) -> str | None:
        """The id of a valid, unexpired, unrevoked session cookie."""
        body, _, mac = cookie.rpartition(".")
        session, _, expiry = body.partition(".")
        if not (session and expiry.isascii() and expiry.isdigit()) or not hmac.compare_digest(mac, self._mac(body)):
            return None
        if int(expiry) <= time.time() or session in self.revoked:
            return None
        return session

    def revoke(self, cookie: str) -> None:
        session = self.session_id(cookie)
        now = time.time()
        self.revoked = {s: e for s, e in self.revoked.items() if e > now}
        if session is not None:
            self.revoked[session] = float(cookie.split(".")[1])

    def _mac(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()


class FailedAttempts:
    """Failed credential checks per client address over the last minute."""

    def __init__(self, limit: int = FAILED_ATTEMPTS_PER_MINUTE, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self.by_address: OrderedDict[str, deque[float]] = OrderedDict()

    def blocked(self, address: str) -> bool:
        recent = self._recent(address)
        return recent is not None and len(recent) >= self.limit

    def record(self, address: str) -> None:
        recent = self._recent(address)
        if recent is None:
            recent = self.by_address[address] = deque()
            while len(self.by_address) > TRACKED_ADDRESSES:
                self.by_address.popitem(last=False)
        recent.append(time.monotonic())

    def _recent(self, address: str) -> deque[float] | None:
        recent = self.by_address.get(address)
        if recent is None:
            return None
        while recent and recent[0] < time.monotonic() - self.window_s:
            recent.popleft()
        return recent


class AccessControl:
    def __init__(self, settings: Settings) -> None:
        self.token = settings.auth_token
        self.proxy_header = settings.trust_proxy_header
        self.open_paths = OPEN_PATHS | ({"/metrics"} if settings.public_metrics else set())
        proxies = settings.trusted_proxies or ([] if settings.proxy_secret else list(LOOPBACK))
        self.trusted_proxies = [ipaddress.ip_network(cidr, strict=False) for cidr in proxies]
        self.proxy_secret = settings.proxy_secret
        self.sessions = Sessions(self.token) if self.token else None
        self.failures = FailedAttempts()

    def token_matches(self, offered: str) -> bool:
        return bool(self.token) and hmac.compare_digest(offered.encode(), self.token.encode())

    def from_trusted_proxy(self, request: Request) -> bool:
        """The request comes from the proxy in front: a trusted address, or the proxy's shared secret."""
        if self.proxy_secret:
            offered = request.headers.get(PROXY_SECRET_HEADER, "")
            if hmac.compare_digest(offered.encode(), self.proxy_secret.encode()):
                return True
        try:
            address = ipaddress.ip_address(client_address(request))
        except ValueError:
            return False
        return any(address in network for network in self.trusted_proxies)

    def identify(self, request: Request) -> str | None:
        """Who makes the request (the proxy's user name, or "token"), or None when not allowed in."""
        if self.proxy_header:
            user = request.headers.get(self.proxy_header, "").strip()
            if user and self.from_trusted_proxy(request):
                return user
        if self.token:
            scheme, _, offered = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and self.token_matches(offered.strip()):
                return "token"
            cookie = request.cookies.get(SESSION_COOKIE, "")
            if cookie and self.sessions is not None and self.sessions.session_id(cookie):
                return "token"
        return None

    def counted_address(self, request: Request) -> str | None:
        """Whose failed attempts a request's are: the client a trusted proxy names in X-Forwarded-For, else
        the peer. None for loopback: local processes are the user's own (and a web page cannot send a
        bearer token cross-site), and limiting them would lock out local scripts and tests."""
        address = client_address(request)
        forwarded = request.headers.get("x-forwarded-for", "").split(",")[-1].strip()
        if forwarded and self.from_trusted_proxy(request):
            address = forwarded
        try:
            return None if ipaddress.ip_address(address).is_loopback else address
        except ValueError:
            return address[:64]

    def attempted(self, request: Request) -> bool:
        """The request offers a bearer token: refused, it is a failed attempt. (Not a stale session cookie:
        a browser's pages would lock it out after a token change, and an HMAC cannot be guessed.)"""
        return bool(self.token) and bool(request.headers.get("authorization"))

    def refusal(self, request: Request) -> Response:
        if not self.token:
            return JSONResponse(
                {"detail": f"this server is reached through its authenticating proxy: the {self.proxy_header} "
                 "header is missing (or does not come from the trusted proxy)"},
                status_code=403,
            )  # fmt: skip
        headers = {"WWW-Authenticate": 'Bearer realm="profscope"', "Cache-Control": "no-store"}
        wants_page = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if wants_page:
            return login_page(request, _local_target(request.url.path, request.url.query), status_code=401,
                              headers=headers)  # fmt: skip
        return JSONResponse(
            {"detail": "authentication required: send 'Authorization: Bearer <token>' or log in at /login"},
            status_code=401,
            headers=headers,
        )


def client_address(request: Request) -> str:
    return request.client.host if request.client else ""


def too_many_attempts() -> Response:
    return JSONResponse(
        {"detail": "too many failed attempts from this address: wait a minute"},
        status_code=429,
        headers={"Retry-After": "60", "Cache-Control": "no-store"},
    )


class AccessMiddleware(BaseHTTPMiddleware):
    def __init__(self, app, control: AccessControl) -> None:  # type: ignore[no-untyped-def]
        super().__init__(app)
        self.control = control

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if route_path(request.scope) in self.control.open_paths:
            return await call_next(request)
        control, address = self.control, self.control.counted_address(request)
        limited = address is not None and control.attempted(request)
        if limited and control.failures.blocked(address):  # type: ignore[arg-type]
            return too_many_attempts()
        user = control.identify(request)
        if user is None:
            if limited:
                control.failures.record(address)  # type: ignore[arg-type]
            return control.refusal(request)
        request.state.user = user
        return await call_next(request)


# ---- the login form (only with --auth-token) ---------------------------------------------------
router = APIRouter(include_in_schema=False)


def _local_target(path: str, query: str = "") -> str:
    """A same-site path to return to after login (never another host: no open redirect)."""
    target = path + (f"?{query}" if query else "")
    if not target.startswith("/") or target.startswith("//") or "\\" in target or target.startswith("/login"):
        return "/"
    return target


def login_page(request: Request, next_url: str, status_code: int = 200, error: str = "",
               headers: dict[str, str] | None = None) -> HTMLResponse:  # fmt: skip
    from profscope.pages import templates

    response = templates.TemplateResponse(
        request, "login.html", {"next_url": next_url, "error": error}, status_code=status_code, headers=headers
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _control(request: Request) -> AccessControl | None:
    return getattr(request.app.state, "access_control", None)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    control = _control(request)
    if control is None or not control.token:
        return RedirectResponse("/", status_code=303)
    return login_page(request, _local_target(next))


@router.post("/login")
async def login(request: Request) -> Response:
    control = _control(request)
    if control is None or not control.token or control.sessions is None:
        return RedirectResponse("/", status_code=303)
    address = control.counted_address(request)
    if address is not None and control.failures.blocked(address):
        return too_many_attempts()
    body = await _read_limited(request, MAX_LOGIN_FORM_BYTES)
    if body is None:
        return JSONResponse({"detail": f"the login form is larger than {MAX_LOGIN_FORM_BYTES} bytes"}, status_code=413)
    form = parse_qs(body.decode("utf-8", "replace"))
    offered = (form.get("token") or [""])[0].strip()
    target = _local_target((form.get("next") or ["/"])[0])
    if not control.token_matches(offered):
        if address is not None:
            control.failures.record(address)
        return login_page(request, target, status_code=401, error="That token is not the one this server expects.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE, control.sessions.issue(), max_age=SESSION_MAX_AGE_S, httponly=True, samesite="lax",
        secure=_came_over_https(control, request), path="/",
    )  # fmt: skip
    return response


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it proves longer than ``limit`` (never buffered whole)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _came_over_https(control: AccessControl, request: Request) -> bool:
    if request.url.scheme == "https":
        return True
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return forwarded == "https" and control.from_trusted_proxy(request)


@router.post("/logout")
def logout(request: Request) -> Response:
    """Ends this browser's session (a POST: a link or an image on another site cannot log anyone out)."""
    control = _control(request)
    if control is not None and control.sessions is not None:
        control.sessions.revoke(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
