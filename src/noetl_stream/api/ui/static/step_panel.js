// One step's panel on the execution page, in tabs: Output (its result), Input (what each task
// was called with, rendered), Logs (what its tasks printed), Errors (its error and every
// attempt, as they happen), Events (the step's events).
"use strict";

const STEP_PANEL = (() => {
  const { el, json, short, duration } = NS;
  const OUTCOMES = new Set(["step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed"]);
  const FAILURES = new Set(["step.failed", "loop.iteration.failed", "step.timeout", "loop.failed"]);
  const ATTEMPTS = new Set(["retry.started", "retry.processed", "task.redelivered"]);
  // Fields every outcome event has; any other field is shown as is in the Output tab.
  const KNOWN = new Set(["event_id", "event_type", "timestamp", "execution_id", "parent_execution_id",
    "step", "step_run_id", "iteration", "status", "result", "error", "ctx_patch", "http", "route",
    "case_matched", "duration_ms", "run", "time", "output", "pool", "restart", "cursor", "input"]);
  const TABS = [["output", "Output"], ["input", "Input"], ["logs", "Logs"], ["errors", "Errors"],
    ["events", "Events"]];
  const RECENT = 50; // outcomes a tab lists for a loop: the latest ones

  const hasIteration = (e) => e.iteration !== null && e.iteration !== undefined;
  const tag = (e) => (hasIteration(e) ? ` #${e.iteration}` : "");

  function errorBlock(error, open) {
    const text = (error && (error.message || error.reason)) || "error";
    // A traceback reads as lines of its own, not as one JSON string full of \n.
    const { traceback, ...fields } = error && typeof error === "object" ? error : { error };
    return el("details", { class: "step-error", open: open || null },
      el("summary", {}, short(text, 200)), el("pre", {}, json(fields)),
      typeof traceback === "string" ? el("div", { class: "traceback" }, traceback) : null);
  }

  function captured(event) {
    const out = [];
    for (const [task, printed] of Object.entries(event.output || {})) {
      for (const stream of ["stdout", "stderr"]) {
        const text = printed && printed[stream];
        if (!text) continue;
        const cut = printed.truncated ? ` (the last part of ${printed[stream + "_bytes"]} bytes)` : "";
        out.push(el("div", { class: `captured ${stream}` }, el("h4", {}, `${task}${tag(event)} ${stream}${cut}`),
          el("pre", {}, text)));
      }
    }
    return out;
  }

  function extraFields(event) {
    const out = [];
    for (const [key, value] of Object.entries(event)) {
      if (KNOWN.has(key) || value === null || value === undefined || value === "") continue;
      out.push(el("div", { class: "captured" }, el("h4", {}, key),
        el("pre", {}, typeof value === "string" ? value : json(value))));
    }
    return out;
  }

  function inputs(event) {
    return Object.entries(event.input || {}).map(([task, call]) => {
      const head = `${task}${tag(event)} (${call.kind || "task"}${call.attempt > 1 ? `, attempt ${call.attempt}` : ""})`;
      if (call.truncated) {
        return el("div", { class: "task-input", "data-task": task }, el("h4", {}, head),
          el("p", { class: "muted" }, `${call.bytes} bytes: too large to carry in the event`));
      }
      const parts = [el("h4", {}, head)];
      if (call.input && Object.keys(call.input).length) parts.push(el("h5", {}, "input"), el("pre", { class: "input" }, json(call.input)));
      // Text of several lines (a python task's code, SQL, a shell command) reads as itself, not
      // as one JSON string full of \n and \".
      const config = { ...(call.config || {}) };
      const texts = Object.entries(config).filter(([, v]) => typeof v === "string" && v.includes("\n"));
      for (const [key] of texts) delete config[key];
      if (Object.keys(config).length) parts.push(el("h5", {}, "config"), el("pre", { class: "config" }, json(config)));
      for (const [key, text] of texts) parts.push(el("h5", {}, key), el("pre", { class: "config-text", "data-field": key }, text));
      return el("div", { class: "task-input", "data-task": task }, parts);
    });
  }

  // What happened to each attempt: retries as the worker announces them, then the outcomes.
  function attemptLine(frame, offset, describe) {
    const e = frame.event;
    let what;
    if (frame.type === "retry.started") what = describe(frame.type, e);
    else if (frame.type === "retry.processed") {
      what = `attempt ${e.attempt} ${e.status === "error" || e.ok === false ? "failed" : "ended"}` +
        `${e.status_code ? `: HTTP ${e.status_code}` : ""}${e.error ? ": " + short(e.error.message || e.error, 160) : ""}`;
    } else if (frame.type === "task.redelivered") what = `command delivered again (delivery ${e.delivery})`;
    else what = (e.error && (e.error.message || e.error.reason)) || e.reason || frame.type;
    return el("li", { "data-type": frame.type }, `+${offset(e)} `, el("b", {}, frame.type), tag(e), ` ${what}`);
  }

  function tabPanel(name, content, empty) {
    const items = content.filter(Boolean);
    return el("div", { class: "tab-panel", role: "tabpanel", "data-tab": name },
      items.length ? items : el("p", { class: "muted" }, empty));
  }

  // Draw the panel of `step` into `box`. ctx: {record, status, progress, children, events
  // (frames of this step), offset(event), describe(type, event), tab, onTab(name)}.
  function render(box, step, ctx) {
    const { record, events } = ctx;
    box.textContent = "";
    const head = [NS.badge(ctx.status), record && record.runs ? ` ${record.runs} run(s)` : ""];
    if (ctx.progress) {
      head.push(` · loop ${ctx.progress.done}${ctx.progress.total === null ? "" : "/" + ctx.progress.total} done`);
    }
    box.append(el("p", {}, head));
    if (ctx.children.length) {
      box.append(el("p", { class: "children" }, "child executions: ", ctx.children.flatMap((c, i) => [
        i ? ", " : "", el("a", { href: `/executions/${encodeURIComponent(c.id)}` }, c.id),
        c.iteration !== null && c.iteration !== undefined ? ` (#${c.iteration})` : ""])));
    }
    const outcomes = events.filter((f) => OUTCOMES.has(f.type));
    const recent = outcomes.slice(-RECENT);
    const more = (list) => (outcomes.length > recent.length && list.length
      ? el("p", { class: "muted" }, `the last ${recent.length} of ${outcomes.length} outcomes`) : null);

    const output = [];
    if (record && record.result !== null && record.result !== undefined) {
      output.push(el("pre", { class: "result" }, json(record.result)));
    }
    for (const f of recent) output.push(...extraFields(f.event));
    const inputList = recent.flatMap((f) => inputs(f.event));
    const logs = recent.flatMap((f) => captured(f.event));
    const errors = [];
    if (record && record.error) errors.push(errorBlock(record.error, false));
    const attempts = events.filter((f) => ATTEMPTS.has(f.type) || FAILURES.has(f.type));
    if (attempts.length) {
      errors.push(el("h4", {}, "Attempts"),
        el("ul", { class: "attempts" }, attempts.slice(-200).map((f) => attemptLine(f, ctx.offset, ctx.describe))));
    }
    const evs = events.slice(-200);
    const list = evs.length ? el("ul", { class: "step-events" }, evs.map((f) => el("li", {},
      `+${ctx.offset(f.event)} ${f.type}`, tag(f.event),
      f.event.duration_ms !== undefined ? ` (${duration(f.event.duration_ms)})` : "",
      f.type === "retry.started" ? ` ${ctx.describe(f.type, f.event)}` : ""))) : null;

    const counts = { output: output.length, input: inputList.length, logs: logs.length,
      errors: attempts.length + (record && record.error ? 1 : 0), events: events.length };
    const bar = el("div", { class: "tabs", role: "tablist" }, TABS.map(([name, label]) =>
      el("button", { type: "button", role: "tab", class: "tab", "data-tab": name,
        "aria-selected": String(name === ctx.tab), onclick: () => ctx.onTab(name) },
      label, counts[name] && name !== "output" ? el("span", { class: "tab-count" }, ` ${counts[name]}`) : "")));
    const panels = [
      tabPanel("output", output, ctx.status === "running" ? "No result yet: the step runs." : "No result."),
      tabPanel("input", [more(inputList), ...inputList], ctx.status === "running"
        ? "Each task's rendered input shows when its command ends (the worker reports it with the outcome)."
        : "No task input was reported."),
      tabPanel("logs", [more(logs), ...logs], "Nothing printed."),
      tabPanel("errors", errors, "No error, no retry."),
      tabPanel("events", [evs.length < events.length ? el("p", { class: "muted" }, `the last ${evs.length} of ${events.length}`) : null, list], "No events."),
    ];
    for (const p of panels) p.hidden = p.dataset.tab !== ctx.tab;
    box.append(bar, ...panels);
  }

  // Show another tab without drawing the panel again (an opened error stays open).
  function show(box, name) {
    for (const b of box.querySelectorAll(".tabs .tab")) b.setAttribute("aria-selected", String(b.dataset.tab === name));
    for (const p of box.querySelectorAll(".tab-panel")) p.hidden = p.dataset.tab !== name;
  }

  return { render, show, errorBlock, KNOWN };
})();
