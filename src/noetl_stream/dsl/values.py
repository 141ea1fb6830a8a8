"""Value types templates see besides plain JSON."""

from __future__ import annotations

from typing import Any

LOOP_MARK = "__noetl_loop_results__"


class LoopResults(list[Any]):
    """A loop step's results in iteration order; also reads as NoETL's `{results, count, stats}`.

    `stats` is NoETL's loop aggregation `{total, success, failed}`. A failed iteration fails the
    loop step, so a loop whose results can be read had no failed iteration: `failed` is 0.
    """

    NAMES = frozenset({"results", "count", "stats"})

    def get(self, key: str, default: Any = None) -> Any:
        if key == "results":
            return list(self)
        if key == "count":
            return len(self)
        if key == "stats":
            return {"total": len(self), "success": len(self), "failed": 0}
        return default
