// Recovery on an execution's page, kept apart from the page's own script (execution.js):
// - a Restart button on a failed or cancelled execution (POST .../restart), from where it
//   stopped or from a step chosen in the list;
// - the timeline scrubber: step through the events the execution applied and see the net's
//   marking after each one, rebuilt from its log by the server (GET .../marking), while it
//   runs too (up to its latest event).
// The page hosts it in #recovery-actions and #scrubber-card; nothing else is assumed of it.
"use strict";

(() => {
  const { api, el, duration } = NS;
  const REOPENS = new Set(["failed", "cancelled"]);
  const id = decodeURIComponent(location.pathname.split("/").pop());
  const path = `/api/executions/${encodeURIComponent(id)}`;
  const $ = (x) => document.getElementById(x);

  function restartControls(box, detail) {
    const from = el("select", { id: "restart-from", "aria-label": "restart from" },
      el("option", { value: "" }, "where it stopped"),
      ...Object.keys(detail.steps || {}).map((name) => el("option", { value: name }, `from ${name}`)));
    const button = el("button", { type: "button", id: "restart" }, "Restart");
    const said = el("span", { id: "restart-message", class: "muted", role: "status" });
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const body = from.value ? { from_step: from.value } : {};
        const asked = await api("POST", `${path}/restart`, body);
        said.textContent = `Restart ${asked.restart} requested; following it…`;
        setTimeout(() => location.reload(), 800); // the page follows the execution again
      } catch (err) {
        button.disabled = false;
        NS.showError(said, err);
      }
    });
    box.append(button, from, said);
  }

  function describe(frame, first) {
    const at = typeof frame.timestamp === "number" && typeof first === "number"
      ? ` · +${duration((frame.timestamp - first) * 1000)}` : "";
    return `${frame.event_type}${frame.step ? " " + frame.step : ""}${at}`;
  }

  // The scrubber over `net`; returns the function that gives it the latest frames (a running
  // execution's log grows: it follows the latest event unless a person stepped back).
  function scrubber(card, net) {
    let frames = [];
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.id = "scrub-net";
    const range = el("input", { type: "range", id: "scrub", min: "0", max: "0", value: "0",
      "aria-label": "event" });
    const back = el("button", { type: "button", id: "scrub-back" }, "◀");
    const next = el("button", { type: "button", id: "scrub-next" }, "▶");
    const label = el("p", { id: "scrub-label" });
    const steps = el("ul", { id: "scrub-steps", class: "scrub-steps" });
    const cut = el("p", { class: "muted", hidden: true });
    card.append(el("div", { class: "scrub-bar" }, back, range, next), label,
      el("div", { class: "net-scroll" }, svg), steps, cut);
    const drawing = NET.draw(svg, net, () => {});

    function show(i) {
      if (!frames.length) return;
      const frame = frames[i];
      range.value = String(i);
      label.textContent = `Event ${i + 1} of ${frames.length}: ${describe(frame, frames[0].timestamp)} — execution ${frame.status}`;
      const status = new Map(Object.entries(frame.steps));
      const badges = new Map(Object.entries(frame.joins).map(([s, arrived]) => [s, `join ${arrived.length}`]));
      drawing.mark(status, badges, new Set(frame.running), null);
      steps.textContent = "";
      for (const [name, s] of Object.entries(frame.steps)) {
        steps.append(el("li", {}, el("b", {}, name), ` ${s}${frame.running.includes(name) ? " (running)" : ""}`));
      }
    }
    range.addEventListener("input", () => show(Number(range.value)));
    back.addEventListener("click", () => show(Math.max(0, Number(range.value) - 1)));
    next.addEventListener("click", () => show(Math.min(frames.length - 1, Number(range.value) + 1)));

    return (history) => {
      const latest = !frames.length || Number(range.value) >= frames.length - 1;
      frames = history.frames;
      range.max = String(Math.max(0, frames.length - 1));
      cut.hidden = !history.truncated;
      cut.textContent = `the first ${frames.length} events`;
      if (!frames.length) { label.textContent = "No event applied yet."; return; }
      show(latest ? frames.length - 1 : Math.min(Number(range.value), frames.length - 1));
    };
  }

  async function start() {
    const actions = $("recovery-actions");
    const card = $("scrubber-card");
    if (!actions && !card) return;
    let detail = await api("GET", path);
    if (actions && NS.mayControl() && REOPENS.has(detail.status)) restartControls(actions, detail);
    if (!card || detail.status === "rejected") return;
    const update = scrubber($("scrubber"), await api("GET", `${path}/net`));
    card.hidden = false;
    // While it runs its log grows: the frames are read again every 2 s, and once after its end.
    for (;;) {
      const ended = NS.TERMINAL.has(detail.status);
      update(await api("GET", `${path}/marking`));
      if (ended) return;
      await new Promise((r) => setTimeout(r, 2000));
      detail = await api("GET", path);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    // An unknown execution is said once, by the page's own script.
    start().catch((err) => { const m = $("recovery-message"); if (m && err.status !== 404) NS.showError(m, err); });
  });
})();
