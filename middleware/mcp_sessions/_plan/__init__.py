"""Parse once and classify: a request's calls, their era and wire, and who each belongs to."""

from ._conversation import Conversation
from ._plan import Call, Plan, Planner

__all__ = ["Call", "Conversation", "Plan", "Planner"]
