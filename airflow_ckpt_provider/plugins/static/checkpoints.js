// Checkpoints task view: confirmation dialog and the Clear / Discard calls.
// The page already shows every number; this only adds the two actions.
(function () {
  "use strict";
  // "Open" on the DAG view: show the task instance's tab in the Airflow UI itself. The UI's
  // iframe sandbox forbids navigating the top window from here, so the link is clicked
  // from the (same-origin) parent document; without that, the plain href opens the task
  // view inside this frame.
  document.querySelectorAll("a[data-ui-path]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      try {
        var parentDocument = window.parent.document;
        if (window.parent === window) { return; }
        var anchor = parentDocument.createElement("a");
        anchor.href = link.getAttribute("data-ui-path");  // relative to the UI's <base href>
        anchor.style.display = "none";
        parentDocument.body.appendChild(anchor);
        anchor.click();
        event.preventDefault();
      } catch (e) { /* not embedded, or not same-origin: follow the plain link */ }
    });
  });

  var dataNode = document.getElementById("ckpt-data");
  if (!dataNode) { return; }
  var data = JSON.parse(dataNode.textContent);
  var dialog = document.getElementById("confirm");
  var text = document.getElementById("confirm-text");
  var title = document.getElementById("confirm-title");
  var okButton = document.getElementById("confirm-button");
  var resultBox = document.getElementById("action-result");
  var pending = null;

  function show(kind, message) {
    resultBox.hidden = false;
    resultBox.className = "alert " + kind;
    resultBox.textContent = message;
  }

  function setBusy(busy) {
    document.querySelectorAll("button[data-action]").forEach(function (b) {
      if (busy) { b.dataset.wasDisabled = b.disabled ? "1" : ""; b.disabled = true; }
      else { b.disabled = b.dataset.wasDisabled === "1"; }
    });
  }

  function run(action) {
    setBusy(true);
    show("warn", action === "clear" ? "Clearing…" : "Discarding…");
    fetch("../api/task/" + action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Requested-With": "airflow-ckpt" },
      body: JSON.stringify({
        dag_id: data.dag_id, task_id: data.task_id, run_id: data.run_id, map_index: data.map_index,
        expected_epoch: data.epoch
      })
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        return { status: response.status, body: body };
      });
    }).then(function (answer) {
      if (answer.status === 200) {
        var r = answer.body.result;
        var kept = "";
        if (r.refused_records && r.refused_records.length) {
          kept += " " + r.refused_records.length + " record(s) named files outside the output roots: never " +
            "touched (airflow-ckpt check lists them).";
        }
        if (r.undeclared_output_files) {
          kept += " " + r.undeclared_output_files + " output file(s) kept: this store declares no output root.";
        }
        show(kept ? "error" : "ok", "Done: " + r.deleted_checkpoints + " checkpoint(s) and " + r.deleted_files +
          " file(s) deleted." + kept + " Recorded in the audit log (entry " + answer.body.audit_log_id + ")." +
          (kept ? "" : " Reloading…"));
        if (!kept) { window.setTimeout(function () { window.location.reload(); }, 1500); }
      } else {
        var detail = answer.body.detail;
        if (typeof detail !== "string") { detail = JSON.stringify(detail); }
        show("error", "Not done (HTTP " + answer.status + "): " + detail);
        setBusy(false);
      }
    }).catch(function (err) {
      show("error", "The request failed: " + err + ". Nothing is known to be deleted; reload to see the store.");
      setBusy(false);
    });
  }

  document.querySelectorAll("button[data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      var action = button.getAttribute("data-action");
      var preview = data.previews[action];
      pending = action;
      title.textContent = action === "clear" ? "Clear checkpoints?" : "Discard uncommitted work?";
      text.textContent = preview.description;
      okButton.textContent = action === "clear" ? "Clear checkpoints" : "Discard uncommitted";
      dialog.showModal();
    });
  });

  dialog.addEventListener("close", function () {
    if (dialog.returnValue === "confirm" && pending) { run(pending); }
    pending = null;
  });
})();
