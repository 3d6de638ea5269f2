// The live-calls page: replaces the table's rows with each list the server sends.
// Built with textContent only, so nothing a caller said can become markup.
"use strict";
(function () {
  const script = document.currentScript;
  const columns = JSON.parse(script.dataset.columns);
  const body = document.getElementById("live-calls");
  const empty = document.getElementById("no-live-calls");
  const status = document.getElementById("live-status");

  function row(call) {
    const tr = document.createElement("tr");
    tr.dataset.call = call.id;
    columns.forEach((key, i) => {
      const td = document.createElement("td");
      if (i === 0) {
        const a = document.createElement("a");
        a.href = "/console/calls/" + encodeURIComponent(call.id);
        a.textContent = call[key];
        td.appendChild(a);
      } else {
        td.textContent = call[key];
      }
      tr.appendChild(td);
    });
    return tr;
  }

  const events = new EventSource("/console/live/events");
  events.onopen = () => { status.textContent = "(live)"; };
  events.onerror = () => { status.textContent = "(reconnecting…)"; };
  events.onmessage = (message) => {
    const calls = JSON.parse(message.data);
    body.replaceChildren(...calls.map(row));
    empty.hidden = calls.length > 0;
    status.textContent = "(live, " + new Date().toLocaleTimeString() + ")";
  };
})();
