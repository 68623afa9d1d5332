// The todo page: POST /api/session to log in, then GET/POST/PATCH/DELETE /api/todos.
"use strict";

const $ = id => document.getElementById(id);

function showError(msg) { $("error").textContent = msg || ""; }

function render(todos) {
  const ul = $("todos");
  ul.replaceChildren();
  for (const t of todos) {
    const li = document.createElement("li");
    li.dataset.id = t.id;
    if (t.done) li.classList.add("done");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = t.done;
    box.title = "done";
    box.addEventListener("change", () => complete(t.id, box.checked));
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = t.title;
    const del = document.createElement("button");
    del.className = "quiet";
    del.textContent = "Delete";
    del.addEventListener("click", () => remove(t.id));
    li.append(box, title, del);
    ul.appendChild(li);
  }
  $("empty").hidden = todos.length > 0;
}

async function refresh() {
  const r = await api("GET", "/api/todos");
  if (r.status === 401) return loggedOut();
  if (r.status !== 200) return showError(problem(r));
  render(r.body);
}

function loggedIn(user) {
  $("who").textContent = user;
  $("login-box").hidden = true;
  $("todo-box").hidden = false;
  document.body.dataset.user = user;
  return refresh();
}

function loggedOut() {
  $("login-box").hidden = false;
  $("todo-box").hidden = true;
  delete document.body.dataset.user;
}

async function complete(id, done) {
  const r = await api("PATCH", "/api/todos/" + id, { done });
  if (r.status !== 200) showError(problem(r)); else showError("");
  await refresh();
}

async function remove(id) {
  const r = await api("DELETE", "/api/todos/" + id);
  if (r.status !== 204) showError(problem(r)); else showError("");
  await refresh();
}

document.addEventListener("DOMContentLoaded", async () => {
  $("login-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const r = await api("POST", "/api/session", { user: $("user").value.trim() });
    if (r.status !== 200) return showError(problem(r));
    showError("");
    await loggedIn(r.body.user);
  });
  $("logout").addEventListener("click", async () => {
    await api("DELETE", "/api/session");
    loggedOut();
  });
  $("todo-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const r = await api("POST", "/api/todos", { title: $("title").value });
    if (r.status !== 201) return showError(problem(r));
    showError("");
    $("title").value = "";
    await refresh();
  });
  const me = await api("GET", "/api/session");
  if (me.status === 200) await loggedIn(me.body.user); else loggedOut();
  document.body.dataset.ready = "1";
});
