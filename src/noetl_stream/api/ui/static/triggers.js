// Triggers: state, source, next fire and last execution of each; one trigger's next runs and
// history; pause, resume and fire for those who may (the server checks again).
"use strict";

(() => {
  const { api, el, when, badge } = NS;
  const $ = (x) => document.getElementById(x);
  const REFRESH_MS = 3000;
  let selected = new URLSearchParams(location.search).get("name");

  const enc = (name) => encodeURIComponent(name);

  async function act(name, action) {
    try {
      await api("POST", `/api/triggers/${enc(name)}/${action}`);
      $("triggers-message").textContent = "";
      await refresh();
    } catch (err) {
      NS.showError($("triggers-message"), err);
    }
  }

  // The API waits (up to 10 s) for what the fire came to: say it, with the execution's link,
  // or why none started (the answer's 409 reason, shown as an error).
  async function fire(name) {
    const said = $("fire-outcome");
    said.textContent = `Firing ${name}…`;
    $("triggers-message").textContent = "";
    try {
      const answer = await api("POST", `/api/triggers/${enc(name)}/fire`);
      const link = el("a", { href: `/executions/${enc(answer.execution_id)}` }, answer.execution_id);
      said.textContent = "";
      if (answer.result === "started") said.append(`${name} started execution `, link, ".");
      else said.append(`${name} fired for ${when(answer.nominal_times[0])}; no server has started execution `, link, " yet.");
      await refresh();
    } catch (err) {
      said.textContent = "";
      NS.showError($("triggers-message"), err);
    }
  }

  function actions(t) {
    if (!NS.mayControl()) return null;
    const toggle = t.state === "active"
      ? el("button", { type: "button", class: "pause", onclick: () => act(t.name, "pause") }, "Pause")
      : el("button", { type: "button", class: "resume", onclick: () => act(t.name, "resume") }, "Resume");
    return [toggle, " ",
      el("button", { type: "button", class: "fire", onclick: () => fire(t.name) }, "Fire now")];
  }

  function lastCell(last) {
    if (!last) return "–";
    return [el("a", { href: `/executions/${enc(last.execution_id)}` }, last.execution_id), " ",
      last.status ? badge(last.status) : el("span", { class: "muted" }, "pending")];
  }

  function row(t) {
    return el("tr", { "data-name": t.name, class: t.name === selected ? "here" : null },
      el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(t.name); } }, t.name)),
      el("td", { class: "state" }, badge(t.state)),
      el("td", {}, t.source),
      el("td", {}, t.playbook),
      el("td", { class: "next" }, t.next_fire ? when(t.next_fire) : "–"),
      el("td", { class: "last" }, lastCell(t.last_execution)),
      el("td", { class: "actions" }, actions(t)));
  }

  function detailOf(e) {
    if (e.reason) return e.reason;
    if (e.event_type === "trigger.backfill_requested") return `${e.count} fire time(s) from ${when(e.from_time)} to ${when(e.to_time)}`;
    if (e.message) return `message ${e.message}`;
    return "";
  }

  async function showDetail() {
    if (!selected) return;
    let one;
    try {
      one = await api("GET", `/api/triggers/${enc(selected)}`);
    } catch (err) {
      $("trigger-card").hidden = true;
      return;
    }
    $("trigger-card").hidden = false;
    $("trigger-title").textContent = `${one.name} · ${one.source} → ${one.playbook}`;
    const runs = $("next-runs");
    runs.textContent = "";
    const next = one.next_fires.length ? one.next_fires : (one.next_fire ? [one.next_fire] : []);
    if (!next.length) runs.append(el("li", { class: "muted" }, one.state === "paused" ? "paused: none until resumed" : "not scheduled"));
    for (const t of next) runs.append(el("li", {}, when(t)));
    const page = await api("GET", `/api/triggers/${enc(selected)}/history?limit=200&newest=true`);
    const body = $("trigger-history").querySelector("tbody");
    body.textContent = "";
    for (const e of page.items.slice().reverse()) {
      const type = (e.event_type || "").replace(/^trigger\./, "");
      body.append(el("tr", { "data-type": type, class: type === "failed" ? "failed" : null },
        el("td", {}, when(e.time)), el("td", {}, type),
        // A failed fire names the execution it would have started, which does not exist.
        el("td", {}, e.execution_id && type !== "failed" ? el("a", { href: `/executions/${enc(e.execution_id)}` }, e.execution_id) : "–"),
        el("td", {}, e.nominal_time ? when(e.nominal_time) : "–"),
        el("td", {}, detailOf(e))));
    }
  }

  function select(name) {
    selected = name;
    history.replaceState(null, "", `/triggers?name=${enc(name)}`);
    refresh();
  }

  async function refresh() {
    let rows;
    try {
      rows = (await api("GET", "/api/triggers")).items;
    } catch (err) {
      NS.showError($("triggers-message"), err);
      return;
    }
    const body = $("triggers").querySelector("tbody");
    body.textContent = "";
    if (!rows.length) {
      body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" },
        "No triggers yet (noetl-stream trigger apply FILE, or POST /api/triggers).")));
    }
    for (const t of rows) body.append(row(t));
    await showDetail();
  }

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
