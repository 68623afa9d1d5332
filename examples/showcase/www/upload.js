// The upload page: the form's FormData posted with fetch, the answer shown.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("upload-form");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const r = await fetch("/upload", { method: "POST", body: new FormData(form) });
    const text = await r.text();
    const raw = document.getElementById("raw");
    raw.textContent = "HTTP " + r.status + "\n" + text;
    const ul = document.getElementById("result");
    ul.replaceChildren();
    let answer;
    try { answer = JSON.parse(text); } catch (e) { return; }
    raw.textContent = "HTTP " + r.status + "\n" + JSON.stringify(answer, null, 2); // one field a line
    for (const p of answer.parts || []) {
      const li = document.createElement("li");
      li.className = "part";
      li.dataset.size = p.size;
      li.textContent = (p.filename !== null ? p.filename + " (field " + p.name + ")" : "field " + p.name) +
        ": " + p.size + " bytes" + (p.content_type ? ", " + p.content_type : "");
      ul.appendChild(li);
    }
    document.body.dataset.uploaded = "1";
  });
});
