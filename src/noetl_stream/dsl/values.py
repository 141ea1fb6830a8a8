"""Value types templates see besides plain JSON."""

from __future__ import annotations

from typing import Any

LOOP_MARK = "__noetl_loop_results__"


class LoopResults(list[Any]):
    """A loop step's results in iteration order; also reads as NoETL's `{results, count}`."""

    def get(self, key: str, default: Any = None) -> Any:
        if key == "results":
            return list(self)
        if key == "count":
            return len(self)
        return default
