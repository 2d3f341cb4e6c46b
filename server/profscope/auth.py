"""Optional access control for a shared deployment.

Two ways, either or both (then either one lets a request in):

- ``--auth-token T`` (``PROFSCOPE_AUTH_TOKEN``): a request carries ``Authorization: Bearer T``
  (scripts, Prometheus), or the session cookie that ``/login`` sets after the token is pasted once
  into its form (browsers: the pages' own API calls then carry the cookie). A page request without
  credentials answers 401 with that form, so a pasted link works after one login. The cookie holds
  an HMAC of the token, never the token; it is HttpOnly and SameSite=Lax.
- ``--trust-proxy-header X-Forwarded-User``: an authenticating proxy in front (oauth2-proxy) sets
  the header; a request without it is refused with 403. Only safe when nothing but the proxy can
  reach profscope (a sidecar, a NetworkPolicy).

``/healthz`` and ``/readyz`` stay open for probes; ``/metrics`` too with ``--public-metrics``.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from profscope.config import Settings

SESSION_COOKIE = "profscope_session"
SESSION_MAX_AGE_S = 30 * 24 * 3600
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/login", "/logout"})
MAX_LOGIN_FORM_BYTES = 16 << 10


class AccessControl:
    def __init__(self, settings: Settings) -> None:
        self.token = settings.auth_token
        self.proxy_header = settings.trust_proxy_header
        self.open_paths = OPEN_PATHS | ({"/metrics"} if settings.public_metrics else set())
        self.session = (
            hmac.new(self.token.encode(), b"profscope-session-v1", hashlib.sha256).hexdigest() if self.token else ""
        )

    def token_matches(self, offered: str) -> bool:
        return bool(self.token) and hmac.compare_digest(offered.encode(), self.token.encode())

    def identify(self, request: Request) -> str | None:
        """Who makes the request (the proxy's user name, or "token"), or None when not allowed in."""
        if self.proxy_header:
            user = request.headers.get(self.proxy_header, "").strip()
            if user:
                return user
        if self.token:
            scheme, _, offered = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and self.token_matches(offered.strip()):
                return "token"
            cookie = request.cookies.get(SESSION_COOKIE, "")
            if cookie and hmac.compare_digest(cookie.encode(), self.session.encode()):
                return "token"
        return None

    def refusal(self, request: Request) -> Response:
        if not self.token:
            return JSONResponse(
                {"detail": f"this server is reached through its authenticating proxy: the {self.proxy_header} "
                 "header is missing"},
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


class AccessMiddleware(BaseHTTPMiddleware):
    def __init__(self, app, control: AccessControl) -> None:  # type: ignore[no-untyped-def]
        super().__init__(app)
        self.control = control

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path in self.control.open_paths:
            return await call_next(request)
        user = self.control.identify(request)
        if user is None:
            return self.control.refusal(request)
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
    if control is None or not control.token:
        return RedirectResponse("/", status_code=303)
    body = await request.body()
    form = parse_qs(body[:MAX_LOGIN_FORM_BYTES].decode("utf-8", "replace"))
    offered = (form.get("token") or [""])[0].strip()
    target = _local_target((form.get("next") or ["/"])[0])
    if not control.token_matches(offered):
        return login_page(request, target, status_code=401, error="That token is not the one this server expects.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE, control.session, max_age=SESSION_MAX_AGE_S, httponly=True, samesite="lax",
        secure=request.url.scheme == "https", path="/",
    )  # fmt: skip
    return response


@router.get("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
