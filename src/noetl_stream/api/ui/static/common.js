// What every page shares: the token, API calls, the event stream, and small DOM helpers.
"use strict";

const NS = (() => {
  const TOKEN = "noetl-stream.token";
  const WHO = "noetl-stream.who";
  const TERMINAL = new Set(["completed", "failed", "cancelled", "rejected"]);

  const token = () => localStorage.getItem(TOKEN);
  function who() {
    try { return JSON.parse(localStorage.getItem(WHO) || "null"); } catch { return null; }
  }
  function saveLogin(reply) {
    localStorage.setItem(TOKEN, reply.token);
    localStorage.setItem(WHO, JSON.stringify({ user: reply.user, roles: reply.roles }));
  }
  function forget() {
    localStorage.removeItem(TOKEN);
    localStorage.removeItem(WHO);
  }
  // `run --ui` prints addresses whose fragment carries the run's token: keep it, and take it
  // out of the address bar and history (a fragment never reaches the server or its logs).
  function adoptRunToken() {
    const found = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
    if (!found) return;
    saveLogin({ token: found[1], user: "run", roles: ["admin"] });
    history.replaceState(null, "", location.pathname + location.search);
  }
  adoptRunToken();

  // Where a login may send the browser next: a path of this site, else "/". The URL parser
  // decides, as the browser will (it reads "/\\host" and "/\t/host" as other hosts).
  function sameSitePath(next) {
    if (!next || !next.startsWith("/")) return "/";
    let url;
    try { url = new URL(next, location.origin); } catch { return "/"; }
    return url.origin === location.origin ? url.pathname + url.search + url.hash : "/";
  }

  function toLogin() {
    const here = location.pathname + location.search;
    location.assign("/login?next=" + encodeURIComponent(here));
  }

  class ApiError extends Error {
    constructor(status, body) {
      const error = body && body.error ? body.error : null;
      super(error ? error.message : `HTTP ${status}`);
      this.status = status;
      this.details = error ? error.details : body;
    }
  }

  function headers(extra) {
    const out = { Accept: "application/json", ...(extra || {}) };
    const t = token();
    if (t) out.Authorization = "Bearer " + t;
    return out;
  }

  // One JSON call; a 401 (no or expired session) goes to the login page.
  async function api(method, path, body) {
    const init = { method, headers: headers() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = text; }
    if (resp.status === 401 && path !== "/api/sessions") {
      forget();
      toLogin();
    }
    if (!resp.ok) throw new ApiError(resp.status, data);
    return data;
  }

  // The execution's Server-Sent Events, read with fetch so the bearer token goes along
  // (EventSource cannot send headers). Calls onEvent({seq, type, event}) for each frame and
  // resumes after the last sequence seen when the connection drops; resolves once the stream
  // ends (the execution ended) or `stop()` is called.
  function followEvents(executionId, onEvent) {
    let lastSeq = 0;
    let stopped = false;
    const controller = { abort: null };
    async function once() {
      const abort = new AbortController();
      controller.abort = abort;
      const extra = { Accept: "text/event-stream" };
      if (lastSeq > 0) extra["Last-Event-ID"] = String(lastSeq);
      const resp = await fetch(`/api/executions/${encodeURIComponent(executionId)}/events/stream`,
        { headers: headers(extra), signal: abort.signal });
      if (resp.status === 401) { forget(); toLogin(); return true; }
      if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => null));
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return true;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const parsed = { seq: 0, type: "message", data: "" };
          for (const line of frame.split("\n")) {
            if (line.startsWith(":")) continue;
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            const rest = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "id") parsed.seq = Number(rest);
            else if (field === "event") parsed.type = rest;
            else if (field === "data") parsed.data += rest;
          }
          if (!parsed.data) continue;
          lastSeq = Math.max(lastSeq, parsed.seq);
          onEvent({ seq: parsed.seq, type: parsed.type, event: JSON.parse(parsed.data) });
        }
      }
    }
    const finished = (async () => {
      let wait = 500;
      while (!stopped) {
        try {
          if (await once()) return;
          wait = 500;
        } catch (err) {
          if (stopped) return;
          if (err instanceof ApiError && err.status !== 503) throw err;
          await new Promise((r) => setTimeout(r, wait));
          wait = Math.min(wait * 2, 10000);
        }
      }
    })();
    return {
      finished,
      stop() { stopped = true; if (controller.abort) controller.abort.abort(); },
    };
  }

  // el("a", {href: "/x", class: "y"}, "text", child): text always goes in as text, never HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  function short(value, limit) {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    if (text === undefined) return "";
    return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
  }

  function when(iso) {
    if (!iso) return "–";
    const d = new Date(iso);
    return d.toLocaleString(undefined, { year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function duration(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} m ${Math.round(s % 60)} s`;
    return `${Math.floor(m / 60)} h ${m % 60} m`;
  }

  // How long it ran: to its end, or until now while it runs.
  function elapsed(item) {
    if (!item.started_at) return null;
    const end = item.ended_at ? new Date(item.ended_at) : (TERMINAL.has(item.status) ? null : new Date());
    return end ? end - new Date(item.started_at) : null;
  }

  function badge(status) {
    return el("span", { class: `status ${status}` }, status);
  }

  // A running execution held back by its concurrency limit: why no step has started yet.
  function slotWait(waiting) {
    const key = waiting.key ? ` for ${waiting.key}` : "";
    return `waiting for a slot: at most ${waiting.limit} of ${waiting.group} run at once${key}; ` +
      "its first step starts when one ends";
  }

  // May the logged-in user cancel and signal? Without a login the server runs without
  // authentication and everyone may; the server checks again either way.
  function mayControl() {
    const w = who();
    return !w || (w.roles || []).some((r) => r === "admin" || r === "operator");
  }
  function mayRun() { return mayControl(); }

  function showError(target, err) {
    target.textContent = "";
    if (!err) return;
    target.append(err.message || String(err));
    if (err.details) {
      const details = Array.isArray(err.details)
        ? err.details.map((d) => (typeof d === "string" ? d : d.text || d.message || JSON.stringify(d)))
        : [JSON.stringify(err.details)];
      target.append(el("ul", {}, details.map((d) => el("li", {}, d))));
    }
  }

  function header() {
    const page = document.body.dataset.page;
    for (const link of document.querySelectorAll("[data-nav]")) {
      if (link.dataset.nav === page || (page === "execution" && link.dataset.nav === "executions")) {
        link.classList.add("here");
      }
    }
    const w = who();
    const logout = document.getElementById("logout");
    if (w && page !== "login") {
      document.getElementById("who").textContent = `${w.user} (${w.roles.join(", ")})`;
      logout.hidden = false;
      logout.addEventListener("click", async () => {
        try { await api("DELETE", "/api/sessions/current"); } catch { /* gone already */ }
        forget();
        location.assign("/login");
      });
    }
  }

  document.addEventListener("DOMContentLoaded", header);

  return { api, ApiError, followEvents, el, json, short, when, duration, elapsed, badge, slotWait,
    mayControl, mayRun, showError, saveLogin, forget, who, sameSitePath, TERMINAL };
})();
