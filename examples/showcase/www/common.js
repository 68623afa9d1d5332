// Shared by the showcase's pages: the navigation bar and a JSON fetch helper.
"use strict";

const NAV = [
  ["/", "Flare showcase", "brand"], ["/todos.html", "Todos"], ["/chat.html", "Chat"],
  ["/events.html", "Live events"], ["/upload.html", "Uploads"], ["/docs/", "API docs"],
  ["/status", "Status"],
];

function nav() {
  const h = document.createElement("header");
  for (const [href, text, cls] of NAV) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (cls) a.className = cls;
    if (href === location.pathname) a.classList.add("here");
    h.appendChild(a);
  }
  document.body.prepend(h);
}

// fetch() with a JSON body and a JSON answer: {status, body}.
async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text }; }
  return { status: r.status, body: data };
}

// A readable message for a failed call: {"error":..} or {"errors":[..]}.
function problem(r) {
  if (r.body && r.body.error) return r.body.error;
  if (r.body && r.body.errors) return r.body.errors.map(e => (e.field || "body") + ": " + e.reason).join("; ");
  return "HTTP " + r.status;
}

document.addEventListener("DOMContentLoaded", nav);
