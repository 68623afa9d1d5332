// The live page: "clock" and "todo" events from /events.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const es = new EventSource("/events");
  const state = document.getElementById("state");
  es.onopen = () => { state.textContent = "open"; document.body.dataset.state = "open"; };
  es.onerror = () => { state.textContent = "reconnecting"; document.body.dataset.state = "reconnecting"; };
  es.addEventListener("clock", ev => { document.getElementById("clock").textContent = ev.data; });
  es.addEventListener("todo", ev => {
    const t = JSON.parse(ev.data);
    const li = document.createElement("li");
    li.textContent = t.user + " " + t.action + " “" + t.title + "”";
    const feed = document.getElementById("feed");
    feed.prepend(li);
    while (feed.children.length > 50) feed.lastChild.remove();
  });
});
