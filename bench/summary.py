"""The figures users look at first, in one table, each with its target and the RAW round trips
measured in the same `make bench`; then W1-W3 beside the peer (Temporal's dev server).

Reads the documents the parts wrote (bench/results/latest.json, services.json, cli_run.json,
peer_temporal.json); a part that did not run shows as `not run`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROBE_P50_MS = 7.0
PROBE_P99_MS = 20.0
W3_INPROC_STEPS_S = 3000.0
W3_SERVICES_PYTHON_STEPS_S = 1500.0
SERVICES_RSS_MB = 300.0


def _load(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError):
        return None


def _row(doc: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("rows", []):
        if row.get("workload") == name:
            return dict(row)
    return None


def _ms(row: dict[str, Any] | None) -> str:
    return f"{row['ms_per_step']:.2f} ms" if row else "not run"


def rows(inproc: dict[str, Any] | None, services: dict[str, Any] | None,
         cli: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One dict per probe: what, measured, target, met (None: not measured), RAW beside it."""
    out: list[dict[str, Any]] = []
    stores = _row(inproc, "W3-stores")
    for run in (_row(cli, "RUN-step-100"), _row(cli, "RUN-step-300")):
        if run is not None:
            out.append({"probe": f"{run['workload']}: marginal noop step of `noetl-stream run`",
                        "measured": f"{run['ms_per_step']:.2f} ms = {run['vs_raw']:.2f} x RAW"
                        + ("" if run["met"] is not None else " (within the start's spread)"),
                        "target": run["target"], "met": run["met"],
                        "raw": f"RAW {cli['raw_ms']:.2f} ms" if cli else "",
                        "why": _sequential_why(stores) if run["met"] is False else ""})
    if cli is None:
        out.append({"probe": "RUN-step: marginal noop step of `noetl-stream run`",
                    "measured": "not run", "target": "<= 1.5 x RAW", "met": None, "raw": ""})
    svc_raw = _row(services, "RAW")
    raw_svc = f"RAW {svc_raw['value']:.2f} ms" if svc_raw else ""
    idle = _row(services, "PROBE-idle")
    out.append({"probe": "PROBE-idle: 3-step execution every 1-3 s, services mode",
                "measured": (f"p50 {idle['extra']['p50_ms']:.1f} ms, p99 "
                             f"{idle['extra']['p99_ms']:.1f} ms") if idle else "not run",
                "target": f"p50 <= {PROBE_P50_MS:g}, p99 <= {PROBE_P99_MS:g}",
                "met": (idle["extra"]["p50_ms"] <= PROBE_P50_MS
                        and idle["extra"]["p99_ms"] <= PROBE_P99_MS) if idle else None,
                "raw": raw_svc,
                "why": (f"{idle['extra']['p50_ms'] / 5:.1f} ms per hop of its 5 (start, 3 steps, "
                        f"end) = {idle['extra']['p50_ms'] / 5 / svc_raw['value']:.1f} x RAW; a step's "
                        "path is 5 stored writes in a row (the commit, the command, the attempt's "
                        "start (its claim), the outcome and the outcome's partition copy; a result "
                        "over 1 KiB adds its own write first) with the server's and the worker's "
                        "Python between them" + _store_note(stores))
                if idle and svc_raw else ""})
    w3 = _row(inproc, "W3")
    raw = _row(inproc, "RAW")
    raw_w3 = _row(inproc, "RAW-W3")
    raws = ", ".join(x for x in (f"RAW {raw['ms_per_step']:.2f} ms" if raw else "",
                                 f"RAW-W3 {raw_w3['steps_per_s']:.0f} steps/s" if raw_w3 else "")
                     if x)
    out.append({"probe": "W3 in-process noop (50 x 20 steps)",
                "measured": f"{w3['steps_per_s']:.0f} steps/s" if w3 else "not run",
                "target": f">= {W3_INPROC_STEPS_S:g} steps/s",
                "met": w3["steps_per_s"] >= W3_INPROC_STEPS_S if w3 else None, "raw": raws,
                "why": _w3_why(w3, raw_w3, stores)})
    w3p = _row(services, "W3-python")
    out.append({"probe": "W3 services python (20 x 10 steps)",
                "measured": f"{w3p['extra']['steps_per_s']:.0f} steps/s" if w3p else "not run",
                "target": f">= {W3_SERVICES_PYTHON_STEPS_S:g} steps/s",
                "met": w3p["extra"]["steps_per_s"] >= W3_SERVICES_PYTHON_STEPS_S if w3p else None,
                "raw": raw_svc, "why": _python_why(w3p, _row(services, "W3-noop"))})
    # Judged on PSS: RSS counts the pages forked python children share with their fork server
    # once per child (bench/README.md "Memory"); it is shown beside it.
    rss, pss = ((services or {}).get(k) for k in ("peak_rss_mb", "peak_pss_mb"))
    out.append({"probe": "peak PSS, services with python steps (all processes)",
                "measured": (f"{pss:.0f} MB (RSS {rss:.0f} MB)" if pss and rss
                             else "not run" if not rss else f"RSS {rss:.0f} MB, PSS not measured"),
                "target": f"<= {SERVICES_RSS_MB:g} MB",
                "met": pss <= SERVICES_RSS_MB if pss else None, "raw": ""})
    return out


def _python_why(python: dict[str, Any] | None, noop: dict[str, Any] | None) -> str:
    """W3-python against W3-noop of the same run: what python steps add to the engine's step."""
    if python is None or noop is None:
        return ""
    ratio = python["extra"]["steps_per_s"] / noop["extra"]["steps_per_s"]
    return (f"W3-noop in this run {noop['extra']['steps_per_s']:.0f} steps/s, python at "
            f"{ratio:.0%} of it: the engine's step bounds it, plus one fresh interpreter per "
            "execution (forked, docs/security.md)")


def _store_note(stores: dict[str, Any] | None) -> str:
    every = (stores or {}).get("extra", {}).get("alone", {}).get("all")
    return (f"; a stored write alone took p50 {every['p50_ms']:.2f} ms inside nats-server, fsync "
            "included (W3-stores, in process)" if every else "")


def _sequential_why(stores: dict[str, Any] | None) -> str:
    """A sequential step's time apart: what its stored writes took inside nats-server (the
    tapped chain of bench/run.py's W3-stores, in process) and what is left for the rest.
    """
    if stores is None or "all" not in stores["extra"].get("alone", {}):
        return ""
    every, step_ms = stores["extra"]["alone"]["all"], stores["extra"]["alone_ms_per_step"]
    steps = stores["extra"].get("alone_steps") or 100
    in_store = every["sum_ms"] / steps
    return (f"a chain alone, in process: {step_ms:.2f} ms a step, of which {in_store:.2f} ms "
            f"inside nats-server storing its {every['count'] / steps:.1f} acknowledged writes "
            f"(p50 {every['p50_ms']:.2f} ms each, fsync included) and {step_ms - in_store:.2f} "
            "ms the server's and the worker's Python and the hops between the processes' loops")


def _w3_why(w3: dict[str, Any] | None, raw_w3: dict[str, Any] | None,
            stores: dict[str, Any] | None = None) -> str:
    """What bounds W3 in this run: its share of RAW-W3 (the delivery rules alone, measured
    beside it: the issue's "half the wire's ceiling"), whether the Python process or
    nats-server was short of CPU, or both waited, and how long nats-server took to store a write
    under W3 against a chain alone (W3-stores).
    """
    if w3 is None:
        return ""
    extra = w3.get("extra", {})
    python, nats = extra.get("cpu_python_pct"), extra.get("cpu_nats_pct")
    parts = []
    if raw_w3:
        share = w3["steps_per_s"] / raw_w3["steps_per_s"]
        parts.append(f"{share:.0%} of RAW-W3 in this run (half of it: "
                     f"{'met' if share >= 0.5 else 'missed'})")
    if python is not None and nats is not None:
        bound = ("the Python process's CPU" if python >= 90 else
                 "waits for stored writes (fsync before each ack), neither process short of CPU"
                 if python + nats < 160 else "the machine's two cores")
        parts.append(f"CPU: Python {python:.0f}%, nats-server {nats:.0f}% of wall: bound by "
                     f"{bound}")
    loaded, alone = ((stores or {}).get("extra", {}).get(k, {}) for k in ("w3", "alone"))
    if stores is not None and "all" in loaded and "all" in alone:
        events = loaded.get("NOETL_EVENTS")
        parts.append(f"inside nats-server a stored write took p50 {loaded['all']['p50_ms']:.1f} "
                     f"ms under W3 against {alone['all']['p50_ms']:.2f} ms for a chain alone"
                     + (f" (NOETL_EVENTS {events['p50_ms']:.1f} ms, "
                        f"{events['count'] / stores['steps']:.1f} acknowledged writes a step, "
                        "each stream storing and fsyncing its writes one at a time)"
                        if events else ""))
    return "; ".join(parts)


def peer_rows(services: dict[str, Any] | None, peer: dict[str, Any] | None) -> list[list[str]]:
    """W1-W3 (services mode, noop and python) beside the same shapes on Temporal."""
    theirs = {r["workload"]: r for r in (peer or {}).get("rows", [])}
    lines = []
    for shape in ("W1", "W2", "W3"):
        noop, python = _row(services, f"{shape}-noop"), _row(services, f"{shape}-python")
        other = theirs.get(shape)

        def fig(row: dict[str, Any] | None) -> str:
            if row is None:
                return "not run"
            return f"{row['value']:.2f} ms/step, {row['extra']['steps_per_s']:.0f} steps/s"

        lines.append([shape, fig(noop), fig(python),
                      f"{other['ms_per_step']:.2f} ms/step, {other['steps_per_s']:.0f} steps/s"
                      if other else "skipped" if peer and peer.get("skipped") else "not run"])
    return lines


def _grid(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), "  ".join("-" * w for w in widths),
                      *(fmt.format(*r) for r in body)])


def report(results: Path) -> tuple[str, dict[str, Any]]:
    """The printed tables and the document kept beside the others (summary.json)."""
    inproc = _load(results / "latest.json")
    services = _load(results / "services.json")
    cli = _load(results / "cli_run.json")
    peer = _load(results / "peer_temporal.json")
    probes = rows(inproc, services, cli)
    met = {None: "-", True: "yes", False: "NO"}
    text = [_grid(["probe", "measured", "target", "met?", "RAW in the same run"],
                  [[p["probe"], p["measured"], p["target"], met[p["met"]], p["raw"]]
                   for p in probes])]
    text.extend(f"  {p['probe'].split(':')[0]}: {p['why']}" for p in probes if p.get("why"))
    versus = peer_rows(services, peer)
    text.append("")
    text.append(_grid(["shape", "noetl-stream services noop", "noetl-stream services python",
                       "Temporal dev server"], versus))
    if peer and peer.get("skipped"):
        text.append(f"(peer column skipped: {peer['skipped']})")
    loads = {name: (doc or {}).get("environment", doc or {}).get("loadavg_before")
             for name, doc in (("in-process", inproc), ("services", services), ("run", cli),
                               ("peer", peer))}
    text.append("load average before each part: " + ", ".join(
        f"{k} {v[0]:.1f}" for k, v in loads.items() if v))
    doc = {"probes": probes, "versus_peer": versus, "loadavg_before": loads,
           "all_met": all(p["met"] for p in probes if p["met"] is not None)}
    return "\n".join(text), doc
