"""The gateway's HTTP client of authorization servers, and its one token request: authlib's OAuth 2 client (its httpx
integration, ``AsyncOAuth2Client``) for the code exchange, refresh, revocation (RFC 7009), the token exchange
(RFC 8693) and the ID-JAG grant (RFC 7523) alike, the sign-ins' (``_oauth``) and the exchange's (``_exchange``).

What the gateway chose, where authlib leaves a choice:

- **httpx2**, the library authlib's httpx integration builds on (its httpx fallback is deprecated) and the ``mcp``
  SDK's: each of the gateway's OAuth clients has one ``AsyncOAuth2Client``, which reads the metadata, the keys and
  the registration too (``_answer.read_answer``), so that one library and one pool ask a server.
- **Every answer bounded by the transport** (httpx's documented seam, which authlib's client takes): at most
  :data:`._answer.MAX_ANSWER` bytes as decoded, else :class:`._answer.AnswerTooLong`, however it is read (authlib
  reads a token answer whole).
- **No state between requests**: each call names its client authentication (``_client.ClientAuth``, applied by an
  authlib auth method of its own: the secret only to a server named for it, ``client_id`` beside an assertion) and
  its refresh token or token; authlib's client keeps no token (its answer hooks hand every answer over before it
  would parse and keep one), so one client serves every user and server of a sign-in or an exchange.
- **One reading of an answer**, the gateway's (``_answer.issued``, ``refusal``): authlib's own reading takes any JSON
  with ``error`` for a refusal whatever its status, recurses into a stranger's nesting, and fails on an
  ``expires_in`` that is not a number; so its ``access_token_response`` and ``refresh_token_response`` hooks hand
  the answer to the caller, its status and JSON, as a revocation's is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx2
from authlib.common.urls import add_params_to_qs
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuth2ClientAuth

from ..._wire import jsonrpc
from ._answer import MAX_ANSWER, AnswerTooLong, heard
from ._client import Authentication, ClientAuth, ServerNotNamed

logger = logging.getLogger("mcp_sessions.gateway")

_HOOKS = ("access_token_response", "refresh_token_response")


class TokenAnswer(NamedTuple):
    """A token or revocation endpoint's answer: its status, its JSON (``None`` if not JSON), and the credentials
    the request sent (what the answer must not be quoted for)."""

    status: int
    answer: Any
    sent: tuple[str, ...]


def oauth_client(timeout: float) -> Any:
    """An HTTP client of strangers: authlib's ``AsyncOAuth2Client``, each answer bounded (:class:`_Bounded`), no
    redirect followed (not with the client's secret), no proxy variable or ``.netrc`` read, and a jar that keeps no
    cookie (none one user's request set goes with another's)."""
    keeps_none = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
    transport = _Bounded(httpx2.AsyncHTTPTransport(trust_env=False))
    http = AsyncOAuth2Client(
        transport=transport, trust_env=False, follow_redirects=False, timeout=timeout, cookies=keeps_none
    )
    for hook in _HOOKS:
        http.register_compliance_hook(hook, _handed_over)
    return http


async def token_request(
    http: Any,
    endpoint: str,
    form: Mapping[str, str],
    client: ClientAuth | str,
    audience: str,
    *,
    seconds: float,
    server: str,
    failed: Callable[[str, int], Exception],
) -> TokenAnswer:
    """``form`` at ``endpoint`` by ``http`` (:func:`oauth_client`): its ``grant_type`` ``refresh_token`` by authlib's
    ``refresh_token``, none by its ``revoke_token`` (RFC 7009: ``token``, ``token_type_hint``), another by its
    ``fetch_token``; authenticated as ``client`` (``_client.ClientAuth``, its assertion naming ``audience``; a public
    client's id alone); read as :func:`._answer.read_answer` reads, a failure ``failed``'s naming ``server``."""
    if isinstance(client, str):  # a public client names itself
        authentication = Authentication({"client_id": client}, {}, ())
    else:
        try:
            authentication = client.request(audience)
        except ServerNotNamed as unnamed:
            logger.warning("mcp-sessions gateway: %s: not sent", unnamed)
            raise failed(str(unnamed), 502) from None

    def authenticated(_: object, method: str, uri: str, headers: Any, body: Any) -> tuple[str, Any, str]:
        headers.update(authentication.headers)
        return uri, headers, add_params_to_qs(body, list(authentication.data.items()))

    auth = OAuth2ClientAuth(None, None, authenticated)
    params = dict(form)
    grant = params.pop("grant_type", None)
    if grant is None:
        asked = http.revoke_token(endpoint, auth=auth, **params)
    elif grant == "refresh_token":
        asked = http.refresh_token(endpoint, auth=auth, **params)
    else:
        asked = http.fetch_token(endpoint, grant_type=grant, auth=auth, **params)
    try:
        response = await heard(asked, urlsplit(endpoint).hostname or "", seconds, server, failed)
    except _HandedOver as handed:
        response = handed.response
    answer = jsonrpc.loads(response.content, answer=True, strict=True)
    return TokenAnswer(response.status_code, answer, authentication.sent)


class _HandedOver(Exception):
    """A token endpoint's answer, handed to the gateway before authlib reads it (see the module)."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _handed_over(response: httpx2.Response) -> httpx2.Response:
    raise _HandedOver(response)


class _Bounded(httpx2.AsyncBaseTransport):
    """``transport`` whose answers are read to at most :data:`MAX_ANSWER` bytes as decoded (a compressed answer's
    bytes counted as they decode), else :class:`AnswerTooLong`."""

    def __init__(self, transport: httpx2.AsyncBaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._transport.handle_async_request(request)
        decoded = ("content-encoding", "content-length")
        headers = [(name, value) for name, value in response.headers.multi_items() if name.lower() not in decoded]
        stream = _BoundedStream(response)
        return httpx2.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._transport.aclose()


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._response.aiter_bytes():
            read += len(chunk)
            if read > MAX_ANSWER:
                raise AnswerTooLong
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()
