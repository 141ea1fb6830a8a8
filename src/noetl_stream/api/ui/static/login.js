// Log in with a user name and password, or an API key; the session token stays in this browser.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("login-form");
  const message = document.getElementById("login-message");
  const target = NS.sameSitePath(new URLSearchParams(location.search).get("next"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = document.getElementById("login-key").value.trim();
    const body = key ? { api_key: key }
      : { user: document.getElementById("login-user").value.trim(),
          password: document.getElementById("login-password").value };
    try {
      NS.saveLogin(await NS.api("POST", "/api/sessions", body));
      location.assign(target);
    } catch (err) {
      if (err.status === 404) {
        message.textContent = "Authentication is off on this server: no login is needed.";
        message.append(" ", NS.el("a", { href: target }, "Go on"));
        return;
      }
      NS.showError(message, err);
    }
  });
  // The button stays disabled until the form is handled here: submitted natively (before this
  // script ran, or without it), the browser would put the password in the page's address.
  document.getElementById("login-submit").disabled = false;
});
