"""The wrapped server's own checks (Host, Origin, Accept, the envelope, the version), answered as it would."""

from ._guard import Guard
from ._parsers import SDK_FRAMES_AT_TRANSPORT
from ._rejection import Rejection
from ._server import ServerGuard, guard_of_manager

__all__ = ["SDK_FRAMES_AT_TRANSPORT", "Guard", "Rejection", "ServerGuard", "guard_of_manager"]
