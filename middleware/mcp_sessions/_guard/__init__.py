"""The wrapped server's own checks (Host, Origin, Accept, the envelope, the version), answered as it would."""

from ._guard import Guard
from ._parsers import MAX_NESTING
from ._rejection import Rejection
from ._server import ServerGuard, guard_of_manager

__all__ = ["MAX_NESTING", "Guard", "Rejection", "ServerGuard", "guard_of_manager"]
