// The chat page: one WebSocket to /ws?name=..&room=..; JSON events in, text out.
"use strict";

const $ = id => document.getElementById(id);
let ws = null;

function line(text) {
  const li = document.createElement("li");
  li.textContent = text; // text, never markup
  $("messages").appendChild(li);
  $("messages").scrollTop = $("messages").scrollHeight;
}

function setState(state) {
  $("state").textContent = state;
  document.body.dataset.state = state;
  const open = state === "open";
  $("text").disabled = !open;
  $("send").disabled = !open;
}

function join(name, room) {
  if (ws) ws.close();
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
    "/ws?name=" + encodeURIComponent(name) + "&room=" + encodeURIComponent(room);
  ws = new WebSocket(url);
  setState("connecting");
  ws.onopen = () => { setState("open"); $("text").focus(); };
  ws.onclose = ev => { setState("closed"); if (ev.code !== 1000 && ev.code !== 1005) line("(disconnected: " + ev.code + ")"); };
  ws.onmessage = ev => {
    const e = JSON.parse(ev.data);
    if (e.type === "msg") line(e.name + ": " + e.text);
    else if (e.type === "join") line(e.name + " joined #" + e.room + ".");
    else if (e.type === "leave") line(e.name + " left #" + e.room + ".");
  };
}

document.addEventListener("DOMContentLoaded", async () => {
  const q = new URLSearchParams(location.search);
  if (q.get("room")) $("room").value = q.get("room");
  if (q.get("name")) {
    $("name").value = q.get("name");
  } else {
    const me = await api("GET", "/api/session"); // the name of the todo login, if any
    if (me.status === 200) $("name").value = me.body.user;
  }
  $("join-form").addEventListener("submit", ev => {
    ev.preventDefault();
    join($("name").value.trim(), $("room").value.trim());
  });
  $("say-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const text = $("text").value;
    if (text && ws && ws.readyState === WebSocket.OPEN) ws.send(text);
    $("text").value = "";
  });
  if (q.get("name")) join($("name").value, $("room").value);
});
