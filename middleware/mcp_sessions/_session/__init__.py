"""The session: what application code sees (:class:`Session`), and the service that mints, resolves and ends it."""

from ._service import PRINCIPAL_CLAIM as PRINCIPAL_CLAIM
from ._service import CreateHook as CreateHook
from ._service import Minted as Minted
from ._service import PrincipalHook as PrincipalHook
from ._service import Quota as Quota
from ._service import RateLimit as RateLimit
from ._service import SessionNotFound as SessionNotFound
from ._service import SessionService as SessionService
from ._service import authenticated_user as authenticated_user
from ._service import caller_of as caller_of
from ._service import digest_of as digest_of
from ._service import principal_digest as principal_digest
from ._session import SCOPE_KEY as SCOPE_KEY
from ._session import STATE_ATTRIBUTE as STATE_ATTRIBUTE
from ._session import HeaderSession as HeaderSession
from ._session import Session as Session
from ._session import SessionBus as SessionBus
from ._session import SessionData as SessionData
from ._session import SessionLogFilter as SessionLogFilter
from ._session import current_conversation as current_conversation
from ._session import current_session as current_session
from ._session import get_session as get_session
from ._session import header_session as header_session
from ._session import inherited as inherited
