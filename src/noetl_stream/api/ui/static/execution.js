// One execution, live: its net with the current marking, what it waits for, each step's result
// and error, and its events as they happen.
"use strict";

(() => {
  const { api, el, json, short, when, duration, elapsed, badge } = NS;
  const id = decodeURIComponent(location.pathname.split("/").pop());
  const path = `/api/executions/${encodeURIComponent(id)}`;
  const STATUS_OF = { "step.started": "running", "step.done": "completed", "step.failed": "failed",
    "step.skipped": "skipped", "step.cancelled": "cancelled", "step.timeout": "failed",
    "loop.done": "completed", "loop.failed": "failed" };

  const $ = (x) => document.getElementById(x);
  let detail = null;
  let report = null;
  let drawing = null;
  let selected = null;
  let firstTs = null;
  let refreshTimer = null;
  let shownStep = null;
  let shownOutcome = null;
  let stepTab = "output"; // the step panel's tab, kept while another step is chosen
  const expanded = new Set(); // loop steps whose iterations the timeline shows
  const children = []; // {id, step, iteration} from `child.started`
  const TIMELINE_ROWS = 1000; // the newest rows kept on the page; the step panel lists the rest
  const events = [];
  const eventStatus = new Map();
  const loopProgress = new Map();

  function message(err) { NS.showError($("exec-message"), err); }

  function terminal() { return detail && NS.TERMINAL.has(detail.status); }

  function renderHead() {
    const status = $("exec-status");
    status.className = `status ${detail.status}`;
    status.textContent = detail.status;
    $("exec-title").textContent = `${detail.playbook_path || detail.playbook_name || "execution"} · ${id}`;
    const facts = $("exec-facts");
    facts.textContent = "";
    if (detail.playbook_path) {
      facts.append("playbook ", el("a", { href: `/catalog?path=${encodeURIComponent(detail.playbook_path)}` },
        detail.playbook_path), " · ");
    }
    facts.append(`started ${when(detail.started_at)} · `, el("span", { id: "exec-duration" },
      duration(elapsed(detail))));
    const wait = $("exec-waiting");
    wait.hidden = !(detail.status === "running" && detail.waiting);
    wait.textContent = wait.hidden ? "" : NS.slotWait(detail.waiting);
    if (detail.parent_execution_id) {
      facts.append(" · child of ", el("a", { href: `/executions/${detail.parent_execution_id}`, id: "exec-parent" },
        detail.parent_execution_id));
    }
    const labels = Object.entries(detail.labels || {});
    if (labels.length) {
      facts.append(" · ", el("span", { id: "exec-labels", class: "labels" }, labels.map(([k, v]) =>
        el("a", { href: `/?label=${encodeURIComponent(`${k}=${v}`)}`, class: "label" }, `${k}=${v}`))));
    }
    if (children.length) {
      facts.append(" · children: ", el("span", { id: "exec-children" }, children.flatMap((c, i) => [i ? ", " : "",
        el("a", { href: `/executions/${encodeURIComponent(c.id)}` }, c.id), ` (${c.step}${c.iteration !== null ? " #" + c.iteration : ""})`])));
    }
    $("actions").hidden = !(NS.mayControl() && detail.status === "running");
  }

  function stepStatus(name) {
    const record = detail && detail.steps ? detail.steps[name] : null;
    return (record && record.status) || eventStatus.get(name) || "pending";
  }

  function renderMarking() {
    if (!drawing) return;
    const status = new Map();
    const badges = new Map();
    const tokens = new Set();
    for (const name of Object.keys(detail.steps || {})) status.set(name, stepStatus(name));
    for (const [name, s] of eventStatus) if (!status.has(name)) status.set(name, s);
    for (const [name, p] of loopProgress) {
      badges.set(name, p.total === null || p.total === undefined ? `${p.done} done` : `${p.done}/${p.total}`);
    }
    if (report && report.status === "running") {
      for (const run of report.running || []) {
        tokens.add(run.step);
        const it = run.iterations;
        if (it) badges.set(run.step, it.total === null ? `${it.done} done` : `${it.done}/${it.total}`);
      }
      for (const join of report.joins || []) {
        if (join.arrived.length) tokens.add(join.step);
        const all = join.arrived.length + join.ruled_out.length + join.waiting_for.length;
        badges.set(join.step, `join ${join.arrived.length}/${all}`);
      }
      for (const token of report.delayed || []) tokens.add(token.to);
    }
    drawing.mark(status, badges, tokens, selected);
  }

  function renderWaiting() {
    const box = $("waiting");
    box.textContent = "";
    if (!report) {
      box.append(el("p", { class: "muted" }, detail.status === "running" ? "…" : "Nothing."));
      return;
    }
    if (report.status !== "running") {
      box.append(el("p", {}, `Nothing: the execution ${report.status}.`));
      return;
    }
    const items = [];
    for (const run of report.running || []) {
      const parts = [el("b", {}, run.step), ` (run ${run.run}) waits for ${run.waits_for}`,
        ` for ${duration(run.waiting_s * 1000)} so far`];
      if (run.deadline) parts.push(run.overdue ? " — OVERDUE" : ` (deadline ${when(run.deadline * 1000)})`);
      const sub = [];
      const it = run.iterations;
      if (it) {
        sub.push(it.total === null
          ? `${it.done} done, ${it.in_flight.length} in flight, ${it.exhausted || 0} of ${it.slots} slots found nothing left`
          : `iterations ${it.done}/${it.total} done, ${it.in_flight.length} in flight`);
      }
      for (const rule of run.listen || []) sub.push(`listens for: ${rule}`);
      for (const child of run.children || []) {
        sub.push(el("span", {}, "child ", el("a", { href: `/executions/${child}` }, child)));
      }
      items.push(el("li", {}, parts, sub.length ? el("ul", {}, sub.map((s) => el("li", {}, s))) : null));
    }
    for (const token of report.delayed || []) {
      items.push(el("li", {}, `token ${token.from} → ${token.to} delayed, fires in ${duration(token.in_s * 1000)}`));
    }
    for (const join of report.joins || []) {
      items.push(el("li", {}, el("b", {}, join.step), ` join waits for ${join.waiting_for.join(", ") || "–"}`,
        ` (arrived: ${join.arrived.join(", ") || "–"})`));
    }
    if (detail.status === "running" && detail.waiting) items.push(el("li", {}, NS.slotWait(detail.waiting)));
    box.append(items.length ? el("ul", { class: "waits" }, items)
      : el("p", {}, "Waiting on nothing the state records."));
  }

  // step_panel.js and gantt.js are deferred (execution.html): used once the page has loaded.
  const errorBlock = (error, open) => STEP_PANEL.errorBlock(error, open);

  function renderStep() {
    const box = $("step-detail");
    // Redraw only when something shown changed, so an error the user opened stays open.
    const mine = selected ? events.filter((e) => e.event.step === selected) : [];
    const mineChildren = children.filter((c) => c.step === selected);
    const shown = JSON.stringify([selected, selected && (detail.steps || {})[selected],
      stepStatus(selected), loopProgress.get(selected), mine.length, mineChildren.length]);
    if (shown === shownStep) return;
    shownStep = shown;
    $("step-name").textContent = selected || "";
    if (!selected) {
      box.textContent = "";
      box.append(el("p", { class: "muted" }, "Click a step in the net or the timeline."));
      return;
    }
    STEP_PANEL.render(box, selected, { record: (detail.steps || {})[selected], status: stepStatus(selected),
      progress: loopProgress.get(selected), children: mineChildren, events: mine, offset, describe,
      tab: stepTab, onTab: (name) => { stepTab = name; STEP_PANEL.show(box, name); } });
  }

  function renderGantt() {
    const box = $("gantt");
    if (!box) return;
    // A timer.scheduled event's timestamp is when it will fire: not a time the execution reached.
    const past = events.filter((e) => e.type !== "timer.scheduled");
    const last = past.length ? past[past.length - 1].event.timestamp : null;
    const ended = detail && detail.ended_at ? new Date(detail.ended_at).getTime() / 1000 : null;
    const now = terminal() && ended !== null ? ended : Math.max(Date.now() / 1000, last || 0);
    GANTT.render(box, events, { start: firstTs, now, expanded, selected, onSelect: select,
      redraw: renderGantt });
  }

  function renderOutcome() {
    const card = $("outcome-card");
    if (!terminal() || detail.status === "rejected") { card.hidden = true; return; }
    if (shownOutcome === detail.status) return;
    shownOutcome = detail.status;
    card.hidden = false;
    const box = $("outcome");
    box.textContent = "";
    if (detail.status === "completed") {
      $("outcome-title").textContent = "Result";
      box.append(el("pre", { class: "result" }, json(detail.result)));
    } else {
      $("outcome-title").textContent = detail.status === "cancelled" ? "Cancelled" : "Error";
      box.append(errorBlock(detail.error, true));
    }
  }

  // When the event happened: a timer's schedule is dated by when it was set (its `timestamp`
  // is when it will fire, shown in its detail).
  function offset(event) {
    const ts = event.event_type === "timer.scheduled" && typeof event.set_at === "number"
      ? event.set_at : event.timestamp;
    if (firstTs === null || typeof ts !== "number") return "";
    return (ts - firstTs).toFixed(2);
  }

  function describe(type, e) {
    if (type === "step.failed" || type === "loop.iteration.failed" || type === "loop.failed") {
      return [e.iteration !== null && e.iteration !== undefined ? `#${e.iteration} ` : "", errorBlock(e.error, false)];
    }
    if (type === "step.done" || type === "loop.iteration.done") {
      const it = e.iteration !== null && e.iteration !== undefined ? `#${e.iteration} ` : "";
      return `${it}${e.duration_ms !== undefined ? duration(e.duration_ms) + " · " : ""}${short(e.result, 120)}`;
    }
    if (type === "loop.started") return e.total === null ? `cursor, ${e.max_in_flight} slots` : `${e.total} items`;
    if (type === "loop.progress") return `${e.done}/${e.total === null ? "?" : e.total}${e.ok === false ? " (an iteration failed)" : ""}`;
    if (type === "step.skipped" || type === "step.cancelled" || type === "step.timeout") return e.reason || "";
    if (type === "execution.completed") return short(e.result, 160);
    if (type === "execution.failed" || type === "execution.cancelled") return errorBlock(e.error, false);
    if (type === "execution.started") return e.playbook || "";
    if (type.startsWith("signal.")) return short(e.data, 160);
    if (type === "timer.scheduled" && typeof e.fire_at === "number" && typeof e.set_at === "number") {
      return `${e.timer_id || "timer"} fires in ${duration((e.fire_at - e.set_at) * 1000)}`;
    }
    if (type === "retry.started") {
      const why = e.after && (e.after.status_code ? `HTTP ${e.after.status_code}` : e.after.error);
      return `attempt ${e.attempt}${e.max_attempts ? "/" + e.max_attempts : ""}` +
        `${typeof e.delay_s === "number" ? ` in ${e.delay_s.toFixed(2)} s` : ""}${why ? ": " + short(why, 120) : ""}`;
    }
    if (type === "task.started") return e.iteration !== null && e.iteration !== undefined ? `#${e.iteration}` : (e.pool ? `pool ${e.pool}` : "");
    return "";
  }

  function onEvent(frame) {
    const e = frame.event;
    if (firstTs === null && typeof e.timestamp === "number") firstTs = e.timestamp;
    events.push(frame);
    if (e.step && STATUS_OF[frame.type]) eventStatus.set(e.step, STATUS_OF[frame.type]);
    if (frame.type === "child.started") {
      const run = String(e.step_run_id || "");
      const step = run.startsWith(`${id}.`) ? run.slice(id.length + 1).replace(/\.\d+$/, "") : run;
      children.push({ id: e.child_execution_id, step, iteration: e.iteration === undefined ? null : e.iteration });
    }
    if (frame.type === "loop.started") loopProgress.set(e.step, { done: 0, total: e.total });
    if (frame.type === "loop.progress") loopProgress.set(e.step, { done: e.done, total: e.total });
    const failed = frame.type.endsWith(".failed") || frame.type === "step.timeout";
    const row = el("tr", { class: failed ? "failed" : frame.type.startsWith("execution.") ? "milestone" : null,
      "data-type": frame.type },
      el("td", { class: "num" }, offset(e)), el("td", {}, frame.type),
      el("td", {}, e.step ? el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); select(e.step); } }, e.step) : ""),
      el("td", {}, describe(frame.type, e)));
    const body = $("timeline").tBodies[0];
    body.append(row);
    if (body.rows.length > TIMELINE_ROWS) body.rows[0].remove();
    $("event-count").textContent = events.length > TIMELINE_ROWS
      ? `(${events.length}, the last ${TIMELINE_ROWS} shown)` : `(${events.length})`;
    renderMarking();
    scheduleRefresh();
  }

  function select(name) {
    selected = name;
    renderMarking();
    renderStep();
    renderGantt();
  }

  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; refresh().catch(message); }, 250);
  }

  async function refresh() {
    detail = await api("GET", path);
    try {
      report = await api("GET", `${path}/explain`);
    } catch (err) {
      report = null;
      if (err.status !== 409) throw err;
    }
    renderHead();
    renderMarking();
    renderWaiting();
    renderStep();
    renderOutcome();
    renderGantt();
  }

  async function follow() {
    // The stream ends with the execution; one that drops earlier is followed again.
    for (;;) {
      const feed = NS.followEvents(id, onEvent);
      window.addEventListener("beforeunload", () => feed.stop(), { once: true });
      await feed.finished;
      try {
        await refresh();
        if (terminal()) return;
      } catch (err) {
        message(err); // the server is away; try again in a moment
      }
      await new Promise((r) => setTimeout(r, 1000));
      events.length = 0;
      children.length = 0;
      eventStatus.clear();
      $("timeline").tBodies[0].textContent = "";
    }
  }

  function wireActions() {
    const cancel = $("cancel");
    let armed = null;
    cancel.addEventListener("click", async () => {
      if (!armed) {
        cancel.textContent = "Really cancel?";
        armed = setTimeout(() => { armed = null; cancel.textContent = "Cancel"; }, 4000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      cancel.disabled = true;
      try {
        const who = NS.who();
        await api("POST", `${path}/cancel`, { reason: `cancelled in the web UI${who ? " by " + who.user : ""}` });
        cancel.textContent = "Cancel requested";
        message(null);
      } catch (err) {
        cancel.disabled = false;
        cancel.textContent = "Cancel";
        message(err);
      }
    });
    $("signal-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const name = $("signal-name").value.trim();
      const raw = $("signal-data").value.trim();
      let data;
      try {
        data = raw ? JSON.parse(raw) : undefined;
      } catch {
        message(new Error("the signal's data is not valid JSON"));
        return;
      }
      try {
        const sent = await api("POST", `${path}/signals/${encodeURIComponent(name)}`, data);
        $("exec-message").textContent = `signal ${sent.signal} sent (event ${sent.seq})`;
      } catch (err) {
        message(err);
      }
    });
  }

  async function start() {
    wireActions();
    try {
      detail = await api("GET", path);
    } catch (err) {
      message(err);
      // Nothing to draw: the message alone, not empty cards around it.
      if (err.status === 404) {
        for (const part of document.querySelectorAll(".execution > .grid, .execution > .card, .execution h1")) part.hidden = true;
      }
      return;
    }
    renderHead();
    if (detail.status === "rejected") {
      $("waiting").append(el("p", {}, "The server rejected this request:"),
        el("ul", {}, (detail.errors || []).map((e) => el("li", {}, e))));
      return;
    }
    try {
      drawing = NET.draw($("net"), await api("GET", `${path}/net`), select);
    } catch (err) {
      message(err);
    }
    await refresh();
    setInterval(() => {
      const shown = $("exec-duration");
      if (shown && detail && !terminal()) {
        shown.textContent = duration(elapsed(detail));
        renderGantt();
      }
    }, 1000);
    await follow();
  }

  document.addEventListener("DOMContentLoaded", () => { start().catch(message); });
})();
