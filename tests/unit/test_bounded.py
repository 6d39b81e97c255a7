"""The one bounded map: what it forgets and in which order."""

from mcp_sessions._bounded import BoundedDict


def test_the_least_recently_stored_goes_first() -> None:
    seen = BoundedDict[str, int](2)
    seen["a"], seen["b"] = 1, 2
    seen["a"] = 3  # storing again makes it the most recent
    seen["c"] = 4
    assert list(seen.items()) == [("a", 3), ("c", 4)]


def test_touch_keeps_an_item_and_evicted_sees_what_goes() -> None:
    gone: list[tuple[str, int]] = []

    class Counting(BoundedDict[str, int]):
        def evicted(self, key: str, value: int) -> None:
            gone.append((key, value))

    seen = Counting(2)
    seen["a"], seen["b"] = 1, 2
    seen.touch("a")
    seen.touch("missing")
    seen["c"] = 3
    assert list(seen) == ["a", "c"]
    assert gone == [("b", 2)]
