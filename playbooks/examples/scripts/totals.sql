-- Rendered as a template, like an inline `command`.
SELECT count(*)::INTEGER AS n, sum(i)::INTEGER AS total
FROM range(1, {{ workload.limit }} + 1) r(i);
