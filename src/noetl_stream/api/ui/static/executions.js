// Executions, newest first: filters in the address (so a filtered list can be shared), pages by
// cursor, and a refresh every few seconds while "live" is on.
"use strict";

(() => {
  const { api, el, when, duration, elapsed, badge } = NS;
  const PAGE = 25;
  const POLL_MS = 2000;
  const $ = (x) => document.getElementById(x);
  const cursors = [null]; // the cursor of each page seen; the last is the current one
  let next = null;
  let timer = null;

  function filters() {
    const q = new URLSearchParams(location.search);
    return { status: q.get("status") || "", path: q.get("path") || "", since: q.get("since") || "" };
  }

  function showFilters() {
    const f = filters();
    $("filter-status").value = f.status;
    $("filter-path").value = f.path;
    // datetime-local wants local time without a zone
    if (f.since) {
      const d = new Date(f.since);
      if (!Number.isNaN(d.getTime())) {
        const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
        $("filter-since").value = local.toISOString().slice(0, 16);
      }
    } else {
      $("filter-since").value = "";
    }
  }

  function query() {
    const f = filters();
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (f.status) q.set("status", f.status);
    if (f.path) q.set("path", f.path);
    if (f.since) q.set("since", f.since);
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set("cursor", cursor);
    return q;
  }

  function row(item) {
    return el("tr", { "data-id": item.execution_id, "data-status": item.status },
      el("td", {}, badge(item.status)),
      el("td", { class: "mono" }, el("a", { href: `/executions/${encodeURIComponent(item.execution_id)}` },
        item.execution_id), item.parent_execution_id ? el("span", { class: "muted" }, " child") : null),
      el("td", {}, item.playbook_path || item.playbook_name || "–"),
      el("td", {}, when(item.started_at)),
      el("td", { class: "num" }, duration(elapsed(item))));
  }

  async function load() {
    try {
      const page = await api("GET", `/api/executions?${query()}`);
      next = page.next_cursor;
      const body = $("executions").tBodies[0];
      body.textContent = "";
      if (!page.items.length) {
        body.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "No executions match.")));
      }
      for (const item of page.items) body.append(row(item));
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
    } catch { /* the filter still takes any path */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    showFilters();
    $("filters").addEventListener("submit", (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      const status = $("filter-status").value;
      const path = $("filter-path").value.trim();
      const since = $("filter-since").value;
      if (status) q.set("status", status);
      if (path) q.set("path", path);
      if (since) q.set("since", new Date(since).toISOString());
      history.replaceState(null, "", q.toString() ? `/?${q}` : "/");
      cursors.length = 1;
      load();
    });
    $("filter-clear").addEventListener("click", () => {
      history.replaceState(null, "", "/");
      showFilters();
      cursors.length = 1;
      load();
    });
    $("page-older").addEventListener("click", () => { if (next) { cursors.push(next); load(); } });
    $("page-newer").addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); load(); } });
    load();
    playbookPaths();
    poll();
  });
})();
