// Registered playbooks and their versions, a playbook's source, and a form to run it.
"use strict";

(() => {
  const { api, el } = NS;
  const $ = (x) => document.getElementById(x);
  let current = null;

  async function show(path, version) {
    const q = version && version !== "latest" ? `?version=${encodeURIComponent(version)}` : "";
    try {
      const playbook = await api("GET", `/api/catalog/${path.split("/").map(encodeURIComponent).join("/")}${q}`);
      $("playbook-card").hidden = false;
      $("playbook-title").textContent = playbook.path;
      $("playbook-facts").textContent = `${playbook.name} · version ${playbook.version || "–"} · ${playbook.playbook_id}`;
      $("playbook-source").textContent = playbook.content;
      NET.draw($("net"), await api("GET", `/api/playbooks/${playbook.playbook_id}/net`), () => {});
      for (const li of document.querySelectorAll("#catalog-paths li")) {
        li.classList.toggle("here", li.dataset.path === path);
      }
      history.replaceState(null, "", `/catalog?path=${encodeURIComponent(path)}` +
        (version && version !== "latest" ? `&version=${encodeURIComponent(version)}` : ""));
      const select = $("run-version");
      select.textContent = "";
      const item = current.find((i) => i.path === path);
      select.append(el("option", { value: "latest" }, "latest"));
      for (const v of Object.keys((item && item.versions) || {}).sort()) {
        select.append(el("option", { value: v, selected: v === version || null }, v));
      }
      $("run-form").hidden = !NS.mayRun();
      $("run-message").textContent = "";
    } catch (err) {
      // An execution run from a file links here by its path, which nothing registered.
      if (err.status === 404 && !version) {
        $("catalog-message").textContent = `${path} is not registered: a playbook run from a file ` +
          "is in the catalog once `noetl-stream register FILE` adds it.";
        return;
      }
      NS.showError($("catalog-message"), err);
    }
  }

  async function run(e) {
    e.preventDefault();
    let payload;
    try {
      payload = JSON.parse($("run-payload").value || "{}");
    } catch {
      $("run-message").textContent = "The payload is not valid JSON.";
      return;
    }
    const version = $("run-version").value;
    const body = { path: $("playbook-title").textContent, payload };
    if (version && version !== "latest") body.version = version;
    try {
      const accepted = await api("POST", "/api/executions", body);
      location.assign(`/executions/${encodeURIComponent(accepted.execution_id)}`);
    } catch (err) {
      NS.showError($("run-message"), err);
    }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("run-form").addEventListener("submit", run);
    try {
      current = (await api("GET", "/api/catalog")).items;
    } catch (err) {
      NS.showError($("catalog-message"), err);
      return;
    }
    const list = $("catalog-paths");
    if (!current.length) {
      list.append(el("li", { class: "muted" }, "Nothing registered yet (noetl-stream register, or POST /api/catalog)."));
    }
    for (const item of current) {
      const versions = Object.keys(item.versions || {}).sort();
      list.append(el("li", { "data-path": item.path },
        el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); show(item.path, null); } }, item.path),
        versions.length ? el("span", { class: "muted" }, " ", versions.join(", ")) : null));
    }
    const q = new URLSearchParams(location.search);
    if (q.get("path")) show(q.get("path"), q.get("version"));
  });
})();
