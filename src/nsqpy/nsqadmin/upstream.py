"""nsqadmin's HTTP client to nsqd and nsqlookupd: one aiohttp session, timeouts, clean errors.

Owns how an address becomes a URL, the connect/request timeouts, optional TLS settings, and
turning every way an upstream call can go wrong (refused, timed out, a non-2xx status,
a body that is not the JSON object we expect) into one ``UpstreamError`` whose text names
the URL and the reason, ready to show on a page. Imports aiohttp and nsqpy.errors only;
never nsqd or lookupd code: nsqadmin reaches the daemons over HTTP like any client.
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlencode

import aiohttp

from nsqpy import __version__
from nsqpy.errors import NsqError

USER_AGENT = f"nsqadmin/nsqpy-{__version__}"


class UpstreamError(NsqError):
    """A call to an nsqd or nsqlookupd failed; ``status``/``code`` are set for HTTP errors,
    and ``detail`` when the answer said why beside its code (a coordinator's refusal)."""

    def __init__(self, message: str, *, status: int = 0, code: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail


def endpoint(address: str, path: str, params: dict[str, str] | None = None) -> str:
    """``host:port`` (or a full ``http(s)://`` base) plus a path and query into a URL."""
    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    url = base.rstrip("/") + path
    return f"{url}?{urlencode(params)}" if params else url


def tls_context(
    *, insecure: bool = False, root_ca: str = "", cert: str = "", key: str = ""
) -> ssl.SSLContext | None:
    """The client TLS settings for https upstreams (None: the defaults)."""
    if not (insecure or root_ca or cert):
        return None
    ctx = ssl.create_default_context(cafile=root_ca or None)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key or None)
    return ctx


class Upstream:
    """GET JSON and POST actions against nsqd/nsqlookupd HTTP APIs."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        request_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(
                total=self.request_timeout_s, sock_connect=self.connect_timeout_s
            )
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(
                timeout=timeout, connector=connector, headers={"User-Agent": USER_AGENT}
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get_json(self, address: str, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON body of a GET; legacy ``{"data": ...}`` envelopes are unwrapped."""
        url = endpoint(address, path, params)
        body = await self.request("GET", url)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise UpstreamError(f"GET {url}: response is not JSON") from None
        if isinstance(doc, dict) and "status_code" in doc and "data" in doc:
            doc = doc["data"]
        return doc

    async def get_object(
        self, address: str, path: str, params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Like get_json, but the body must be a JSON object."""
        doc = await self.get_json(address, path, params)
        if not isinstance(doc, dict):
            raise UpstreamError(f"GET {endpoint(address, path, params)}: not a JSON object")
        return doc

    async def post(self, address: str, path: str, params: dict[str, str] | None = None) -> None:
        """A V1 action (``/topic/pause?topic=...``) whose success body is ignored."""
        await self.request("POST", endpoint(address, path, params))

    async def fetch(self, url: str) -> tuple[int, str, bytes]:
        """A GET passed through whatever its status: (status, content type, body)."""
        try:
            async with self._client().get(url) as resp:
                ctype = resp.headers.get("Content-Type", "application/octet-stream")
                return resp.status, ctype, await resp.read()
        except TimeoutError:
            raise UpstreamError(f"GET {url}: timed out") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamError(f"GET {url}: {exc or type(exc).__name__}") from None

    async def request(self, method: str, url: str, **kwargs: Any) -> bytes:
        """One request; any failure becomes an UpstreamError naming the URL and the reason."""
        try:
            async with self._client().request(method, url, **kwargs) as resp:
                body = await resp.read()
                if resp.status >= 300:
                    code, detail = _error_fields(body)
                    raise UpstreamError(
                        f"{method} {url}: {resp.status} {code or resp.reason}"
                        + (f" ({detail})" if detail else ""),
                        status=resp.status,
                        code=code,
                        detail=detail,
                    )
                return body
        except UpstreamError:
            raise
        except TimeoutError:
            raise UpstreamError(f"{method} {url}: timed out") from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(f"{method} {url}: {_connect_reason(exc.os_error)}") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamError(f"{method} {url}: {exc or type(exc).__name__}") from None


def _connect_reason(err: OSError) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, TimeoutError):
        return "connect timed out"
    return err.strerror or str(err) or type(err).__name__


def _error_fields(body: bytes) -> tuple[str, str]:
    """(code, detail) of a V1 JSON error body: its ``message``, or its text when short and
    not JSON; and the ``detail`` beside it (a coordinator's refusal says why there), at most
    500 characters, "" when there is none."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        text = body.decode("utf-8", "replace").strip()
        return (text if len(text) <= 200 else ""), ""
    if not isinstance(doc, dict):
        return "", ""
    detail = doc.get("detail", "")
    return str(doc.get("message", doc.get("status_txt", ""))), (
        detail[:500] if isinstance(detail, str) else ""
    )
