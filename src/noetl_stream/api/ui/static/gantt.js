// The steps of one execution on a time axis: one bar per step run (start to end, coloured by
// its status), a loop's iterations grouped under their step, collapsed until opened.
// Built from the execution's events alone, so it moves as they arrive.
"use strict";

const GANTT = (() => {
  const { el, duration } = NS;
  const ENDS = { "step.done": "completed", "step.failed": "failed", "step.cancelled": "cancelled",
    "step.timeout": "failed", "loop.done": "completed", "loop.failed": "failed" };
  const ITERATION_ENDS = { "loop.iteration.done": "completed", "loop.iteration.failed": "failed" };
  const ITERATION_ROWS = 200; // an opened loop shows its first iterations; the count says the rest

  function isIteration(e) { return e.iteration !== null && e.iteration !== undefined; }

  // Steps in the order they started: {name, first, runs: Map(run id -> bar), iterations:
  // Map(run id#iteration -> bar)}; a bar is {start, end (null while open), status}.
  function model(events) {
    const steps = new Map();
    const stepOf = (name, ts) => {
      if (!steps.has(name)) {
        steps.set(name, { name, first: ts, runs: new Map(), iterations: new Map() });
      }
      return steps.get(name);
    };
    const bar = (map, key, ts) => {
      if (!map.has(key)) map.set(key, { start: ts, end: null, status: "running", key });
      return map.get(key);
    };
    for (const { type, event: e } of events) {
      const ts = e.timestamp;
      if (!e.step || typeof ts !== "number" || type === "timer.scheduled") continue;
      if (type === "step.skipped") {
        const skipped = bar(stepOf(e.step, ts).runs, "skipped", ts);
        skipped.status = "skipped";
        skipped.end = ts;
        continue;
      }
      if (!e.step_run_id) continue; // a timer or a listener's event: no run of its own to draw
      const step = stepOf(e.step, ts);
      const run = e.step_run_id;
      if (isIteration(e)) {
        const it = bar(step.iterations, `${run}#${e.iteration}`, ts);
        it.iteration = e.iteration;
        if (ITERATION_ENDS[type]) { it.end = ts; it.status = ITERATION_ENDS[type]; }
        if (type === "step.timeout") { it.end = ts; it.status = "failed"; }
        bar(step.runs, run, ts);
        continue;
      }
      const r = bar(step.runs, run, ts);
      if (ENDS[type]) { r.end = ts; r.status = ENDS[type]; }
    }
    return [...steps.values()].sort((a, b) => a.first - b.first);
  }

  function place(node, from, to, axis) {
    const span = Math.max(axis.end - axis.start, 0.001);
    const left = ((from - axis.start) / span) * 100;
    const width = Math.max(((to - from) / span) * 100, 0.4);
    node.style.left = `${Math.min(left, 99.6)}%`;
    node.style.width = `${Math.min(width, 100 - Math.min(left, 99.6))}%`;
  }

  function bars(list, axis, now) {
    return list.map((b) => {
      const end = b.end === null ? now : b.end;
      const node = el("div", { class: `gantt-bar ${b.status}`, "data-status": b.status,
        title: `${b.status} · ${duration((end - b.start) * 1000)}${b.end === null ? " so far" : ""}` });
      place(node, b.start, end, axis);
      return node;
    });
  }

  function spanOf(list, now) {
    if (!list.length) return null;
    const start = Math.min(...list.map((b) => b.start));
    const open = list.some((b) => b.end === null);
    const end = open ? now : Math.max(...list.map((b) => b.end));
    return { start, end, open };
  }

  function statusOf(step) {
    const runs = [...step.runs.values()];
    return runs.length ? runs[runs.length - 1].status : "running";
  }

  function axisRow(axis) {
    const ticks = el("div", { class: "gantt-track gantt-ticks" });
    const span = axis.end - axis.start;
    for (let i = 0; i <= 4; i++) {
      const tick = el("span", { class: "gantt-tick" }, `+${duration((span * i / 4) * 1000)}`);
      tick.style.left = `${i * 25}%`;
      ticks.append(tick);
    }
    return el("div", { class: "gantt-row gantt-axis" }, el("div", { class: "gantt-label" }, "step"),
      ticks, el("div", { class: "gantt-dur" }, "duration"));
  }

  function stepRow(step, axis, now, opts) {
    const runs = [...step.runs.values()];
    const iterations = [...step.iterations.values()].sort((a, b) => a.iteration - b.iteration);
    const span = spanOf(runs.length ? runs : iterations, now);
    const status = statusOf(step);
    const open = opts.expanded.has(step.name);
    const label = el("div", { class: "gantt-label" });
    if (iterations.length) {
      label.append(el("button", { type: "button", class: "gantt-toggle link", "aria-expanded": String(open),
        title: open ? "hide the iterations" : "show the iterations",
        onclick: () => { if (open) opts.expanded.delete(step.name); else opts.expanded.add(step.name); opts.redraw(); } },
      open ? "▾" : "▸"));
    }
    label.append(el("a", { href: "#", class: "gantt-step",
      onclick: (ev) => { ev.preventDefault(); opts.onSelect(step.name); } }, step.name));
    if (iterations.length) {
      const failed = iterations.filter((b) => b.status === "failed").length;
      label.append(el("span", { class: "muted gantt-count" },
        ` ${iterations.length} iteration${iterations.length === 1 ? "" : "s"}${failed ? `, ${failed} failed` : ""}`));
    }
    if (runs.filter((r) => r.key !== "skipped").length > 1) {
      label.append(el("span", { class: "muted" }, ` ${runs.length} runs`));
    }
    const track = el("div", { class: "gantt-track" }, bars(runs.length ? runs : iterations, axis, now));
    const row = el("div", { class: `gantt-row${opts.selected === step.name ? " selected" : ""}`,
      "data-step": step.name, "data-status": status }, label, track,
    el("div", { class: "gantt-dur num" }, span ? duration((span.end - span.start) * 1000) + (span.open ? "…" : "") : ""));
    const out = [row];
    if (iterations.length) {
      const group = el("div", { class: "gantt-iterations", "data-step": step.name, hidden: !open });
      if (open) {
        for (const it of iterations.slice(0, ITERATION_ROWS)) {
          const end = it.end === null ? now : it.end;
          group.append(el("div", { class: "gantt-row iteration", "data-iteration": it.iteration, "data-status": it.status },
            el("div", { class: "gantt-label" }, `#${it.iteration}`),
            el("div", { class: "gantt-track" }, bars([it], axis, now)),
            el("div", { class: "gantt-dur num" }, duration((end - it.start) * 1000) + (it.end === null ? "…" : ""))));
        }
        if (iterations.length > ITERATION_ROWS) {
          group.append(el("p", { class: "muted" }, `… and ${iterations.length - ITERATION_ROWS} more iterations`));
        }
      }
      out.push(group);
    }
    return out;
  }

  // Draw into `box`. opts: {start (epoch s of the execution's start), now (epoch s, for bars
  // still open), expanded (Set of step names), selected, onSelect(step), redraw()}.
  function render(box, events, opts) {
    const steps = model(events);
    box.textContent = "";
    if (!steps.length) {
      box.append(el("p", { class: "muted" }, "No step has started yet."));
      return;
    }
    const ends = steps.flatMap((s) => [...s.runs.values(), ...s.iterations.values()])
      .map((b) => (b.end === null ? opts.now : b.end));
    const axis = { start: opts.start !== null ? opts.start : steps[0].first, end: Math.max(...ends) };
    box.append(axisRow(axis), ...steps.flatMap((s) => stepRow(s, axis, opts.now, opts)));
  }

  return { render, model };
})();
