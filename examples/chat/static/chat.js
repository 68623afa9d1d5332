// Flare chat client: one WebSocket to /ws?name=..&room=..; messages out as
// text, events in as JSON. ?name=..&room=.. in the page URL joins at once.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  let ws = null;
  let me = null;

  function setState(state, text) {
    document.body.dataset.state = state;
    $("status").textContent = text;
  }

  function line(cls, who, text) {
    const li = document.createElement("li");
    li.className = cls;
    if (who) {
      const b = document.createElement("b");
      b.textContent = who;
      li.appendChild(b);
    }
    li.appendChild(document.createTextNode(text));
    $("messages").appendChild(li);
    li.scrollIntoView({ block: "end" });
  }

  function onEvent(ev) {
    switch (ev.type) {
      case "welcome":
        me = ev;
        setState("open", ev.name + " in #" + ev.room);
        line("info", "", "You joined #" + ev.room + ".");
        break;
      case "join":
        if (!me || ev.id !== me.id) line("info", "", ev.name + " joined #" + ev.room + ".");
        break;
      case "leave":
        if (!me || ev.id !== me.id) line("info", "", ev.name + " left #" + ev.room + ".");
        break;
      case "msg":
        line(me && ev.id === me.id ? "msg mine" : "msg", ev.name + ": ", ev.text);
        break;
    }
  }

  function connect(name, room) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = "?name=" + encodeURIComponent(name) + "&room=" + encodeURIComponent(room);
    ws = new WebSocket(proto + "//" + location.host + "/ws" + q);
    setState("connecting", "connecting…");
    $("login").hidden = true;
    $("chat").hidden = false;
    ws.onmessage = (e) => onEvent(JSON.parse(e.data));
    ws.onclose = (e) => {
      setState("closed", "disconnected (" + e.code + ")");
      line("info", "", "Connection closed (" + e.code + ").");
    };
    ws.onerror = () => setState("error", "connection error");
  }

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    connect($("name").value, $("room").value);
  });

  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("text").value;
    if (text && ws && ws.readyState === WebSocket.OPEN) {
      ws.send(text);
      $("text").value = "";
    }
  });

  const params = new URLSearchParams(location.search);
  if (params.get("name") && params.get("room")) connect(params.get("name"), params.get("room"));
})();
