// Executions, newest first: filters in the address (so a filtered list can be shared), counts
// per status, pages by cursor, a refresh every few seconds while "live" is on, and cancelling
// several running executions at once.
"use strict";

(() => {
  const { api, el, when, duration, elapsed, badge, short } = NS;
  const PAGE = 25;
  const POLL_MS = 2000;
  const STATUSES = ["running", "completed", "failed", "cancelled"];
  const FILTERS = ["status", "execution_id", "playbook", "path", "since", "until", "label"];
  const $ = (x) => document.getElementById(x);
  const cursors = [null]; // the cursor of each page seen; the last is the current one
  const picked = new Set(); // running executions ticked for cancelling
  let next = null;
  let timer = null;
  let armed = null;

  function filters() {
    const q = new URLSearchParams(location.search);
    return Object.fromEntries(FILTERS.map((k) => [k, q.get(k) || ""]));
  }

  // datetime-local wants local time without a zone
  function localInput(iso) {
    const d = new Date(iso);
    if (!iso || Number.isNaN(d.getTime())) return "";
    return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  }

  function showFilters() {
    const f = filters();
    $("filter-status").value = f.status;
    $("filter-id").value = f.execution_id;
    $("filter-path").value = f.playbook || f.path;
    $("filter-since").value = localInput(f.since);
    $("filter-until").value = localInput(f.until);
  }

  function query() {
    const q = new URLSearchParams({ limit: String(PAGE) });
    for (const [key, value] of Object.entries(filters())) if (value) q.set(key, value);
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set("cursor", cursor);
    return q;
  }

  function go(changes) {
    const q = new URLSearchParams(location.search);
    for (const [key, value] of Object.entries(changes)) {
      if (value) q.set(key, value); else q.delete(key);
    }
    history.replaceState(null, "", q.toString() ? `/?${q}` : "/");
    showFilters();
    cursors.length = 1;
    load();
  }

  function labels(item) {
    return Object.entries(item.labels || {}).map(([k, v]) => el("a", { href: "#", class: "label",
      title: `only executions labelled ${k}=${v}`,
      onclick: (ev) => { ev.preventDefault(); go({ label: `${k}=${v}` }); } }, `${k}=${v}`));
  }

  function row(item) {
    const running = item.status === "running";
    const pick = running ? el("input", { type: "checkbox", class: "pick", value: item.execution_id,
      "aria-label": `select ${item.execution_id}`, checked: picked.has(item.execution_id),
      onchange: (ev) => { if (ev.target.checked) picked.add(item.execution_id); else picked.delete(item.execution_id); bulkState(); } }) : "";
    return el("tr", { "data-id": item.execution_id, "data-status": item.status },
      el("td", {}, pick),
      el("td", {}, badge(item.status), running && item.waiting ?
        el("span", { class: "slot-wait", title: NS.slotWait(item.waiting) }, " waiting for a slot") : null),
      el("td", { class: "mono" }, el("a", { href: `/executions/${encodeURIComponent(item.execution_id)}` },
        item.execution_id), item.parent_execution_id ? el("span", { class: "muted" }, " child of ",
        el("a", { href: `/executions/${encodeURIComponent(item.parent_execution_id)}` }, item.parent_execution_id)) : null),
      el("td", {}, item.playbook_path || item.playbook_name || "–"),
      el("td", { class: "labels" }, labels(item)),
      el("td", {}, when(item.started_at)),
      el("td", { class: "num" }, duration(elapsed(item))),
      el("td", { class: "error", title: item.error_message || "" }, short(item.error_message || "", 240)));
  }

  function showCounts(counts) {
    const box = $("counts");
    box.textContent = "";
    const current = filters().status;
    const total = Object.values(counts || {}).reduce((a, b) => a + b, 0);
    const link = (status, label, n) => el("a", { href: "#", class: current === status ? "here" : null,
      "data-status": status || "any", onclick: (ev) => { ev.preventDefault(); go({ status }); } },
    status ? badge(label) : el("b", {}, label), el("span", { class: "count" }, String(n)));
    box.append(link("", "all", total));
    const known = [...STATUSES, ...Object.keys(counts || {}).filter((s) => !STATUSES.includes(s))];
    for (const status of known) box.append(link(status, status, (counts || {})[status] || 0));
  }

  function bulkState() {
    const button = $("cancel-selected");
    button.disabled = picked.size === 0;
    if (!armed) button.textContent = picked.size ? `Cancel selected (${picked.size})` : "Cancel selected";
  }

  async function cancelPicked() {
    const button = $("cancel-selected");
    if (!armed) {
      button.textContent = `Really cancel ${picked.size}?`;
      armed = setTimeout(() => { armed = null; bulkState(); }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    button.disabled = true;
    const who = NS.who();
    const reason = `cancelled in the web UI${who ? " by " + who.user : ""}`;
    const ids = [...picked];
    const failed = [];
    await Promise.all(ids.map(async (id) => {
      try {
        await api("POST", `/api/executions/${encodeURIComponent(id)}/cancel`, { reason });
        picked.delete(id);
      } catch (err) {
        failed.push(`${id}: ${err.message}`);
      }
    }));
    const note = $("list-message");
    note.textContent = "";
    if (failed.length) NS.showError(note, Object.assign(new Error(`${failed.length} of ${ids.length} not cancelled`), { details: failed }));
    $("bulk-note").textContent = `cancel requested for ${ids.length - failed.length} of ${ids.length}`;
    bulkState();
    await load();
  }

  async function load() {
    try {
      const page = await api("GET", `/api/executions?${query()}`);
      next = page.next_cursor;
      const body = $("executions").tBodies[0];
      body.textContent = "";
      if (!page.items.length) {
        body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No executions match.")));
      }
      for (const item of page.items) body.append(row(item));
      const shownRunning = new Set(page.items.filter((i) => i.status === "running").map((i) => i.execution_id));
      for (const id of [...picked]) if (!shownRunning.has(id)) picked.delete(id); // ended meanwhile
      $("select-all").checked = shownRunning.size > 0 && [...shownRunning].every((id) => picked.has(id));
      showCounts(page.counts);
      bulkState();
      $("page-older").disabled = !next;
      $("page-newer").disabled = cursors.length < 2;
      $("page-number").textContent = `page ${cursors.length}`;
      $("list-message").textContent = "";
    } catch (err) {
      NS.showError($("list-message"), err);
    }
  }

  function poll() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if ($("live").checked && document.visibilityState === "visible") await load();
      poll();
    }, POLL_MS);
  }

  async function playbookPaths() {
    try {
      const catalog = await api("GET", "/api/catalog");
      $("playbook-paths").append(...catalog.items.map((i) => el("option", { value: i.path })));
    } catch { /* the filter still takes any text */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    showFilters();
    $("filters").addEventListener("submit", (e) => {
      e.preventDefault();
      const since = $("filter-since").value;
      const until = $("filter-until").value;
      go({ status: $("filter-status").value, execution_id: $("filter-id").value.trim(),
        playbook: $("filter-path").value.trim(), path: "",
        since: since ? new Date(since).toISOString() : "", until: until ? new Date(until).toISOString() : "" });
    });
    $("filter-clear").addEventListener("click", () => {
      history.replaceState(null, "", "/");
      showFilters();
      cursors.length = 1;
      load();
    });
    $("select-all").addEventListener("change", (ev) => {
      for (const box of document.querySelectorAll("#executions input.pick")) {
        box.checked = ev.target.checked;
        if (box.checked) picked.add(box.value); else picked.delete(box.value);
      }
      bulkState();
    });
    $("cancel-selected").addEventListener("click", () => { cancelPicked().catch((err) => NS.showError($("list-message"), err)); });
    $("page-older").addEventListener("click", () => { if (next) { cursors.push(next); load(); } });
    $("page-newer").addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); load(); } });
    load();
    playbookPaths();
    poll();
  });
})();
