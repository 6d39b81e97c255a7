"""Parse once and classify: a request's calls, their era and wire, and who each belongs to."""

from ._plan import Call, Conversation, Plan, Planner

__all__ = ["Call", "Conversation", "Plan", "Planner"]
