// Checkpoints task view: confirmation dialog and the Clear / Discard calls.
// The page already shows every number; this only adds the two actions. The dialog reads
// what the action would delete when it opens (../api/task/<action>/preview): the counts,
// the output roots and the records the deletion guard refuses, which the page itself
// never reads. "Delete" stays disabled until that answer is shown.
(function () {
  "use strict";
  // What the task view's scripts share (reprocess.js too): a same-origin JSON POST to
  // ../api/task/<path>, answered as {status, body}; the message of a refused answer; a result line.
  var view = window.ckptView = {
    post: function (path, payload) {
      return fetch("../api/task/" + path, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Requested-With": "airflow-ckpt" },
        body: JSON.stringify(payload)
      }).then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (body) {
          return { status: response.status, body: body };
        });
      });
    },
    detailOf: function (body) {
      var detail = body.detail;
      return typeof detail === "string" ? detail : JSON.stringify(detail);
    },
    show: function (box, kind, message) {
      box.hidden = false;
      box.className = "alert " + kind;
      box.textContent = message;
    }
  };

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
  function byId(id) { return document.getElementById(id); }
  var dialog = byId("confirm"), title = byId("confirm-title"), text = byId("confirm-text");
  var okButton = byId("confirm-button"), resultBox = byId("action-result");
  var refusedBox = byId("confirm-refused"), refusedTitle = byId("confirm-refused-title");
  var refusedList = byId("confirm-refused-list");
  var pending = null;  // {action, epoch}: what the person is asked to confirm
  var asked = 0;  // the newest preview request: an older answer arriving late is ignored

  function showRefused(lines, count) {
    refusedList.textContent = "";
    refusedBox.hidden = !count;
    if (!count) { return; }
    refusedTitle.textContent = count + " record(s) name what no deletion may touch: kept, never acted on" +
      (count > lines.length ? " (first " + lines.length + " shown; airflow-ckpt check lists all)" : "") + ":";
    lines.forEach(function (line) {
      var item = document.createElement("li");
      item.textContent = line;
      refusedList.appendChild(item);
    });
  }

  function show(kind, message) { view.show(resultBox, kind, message); }

  function setBusy(busy) {
    document.querySelectorAll("button[data-action]").forEach(function (b) {
      if (busy) { b.dataset.wasDisabled = b.disabled ? "1" : ""; b.disabled = true; }
      else { b.disabled = b.dataset.wasDisabled === "1"; }
    });
  }

  function run(action, epoch) {
    setBusy(true);
    show("warn", action === "clear" ? "Clearing…" : "Discarding…");
    // The epoch the dialog's preview was read at: the server refuses if the store moved on since.
    view.post(action, {
      dag_id: data.dag_id, task_id: data.task_id, run_id: data.run_id, map_index: data.map_index,
      expected_epoch: epoch
    }).then(function (answer) {
      if (answer.status === 200) {
        var r = answer.body.result;
        var kept = "";
        if (r.refused_records && r.refused_records.length) {
          kept += " " + r.refused_records.length + " record(s) named files outside the output roots: never " +
            "touched (airflow-ckpt check lists them).";
        }
        if (r.undeclared_output_files) {
          kept += " " + r.undeclared_output_files + " output file(s) kept: no output root is declared " +
            "(set output_roots on the DAG's tasks, or [ckpt] trusted_output_roots).";
        }
        show(kept ? "error" : "ok", "Done: " + r.deleted_checkpoints + " checkpoint(s) and " + r.deleted_files +
          " file(s) deleted." + kept + " Recorded in the audit log (entry " + answer.body.audit_log_id + ")." +
          (kept ? "" : " Reloading…"));
        if (!kept) { window.setTimeout(function () { window.location.reload(); }, 1500); }
      } else {
        show("error", "Not done (HTTP " + answer.status + "): " + view.detailOf(answer.body));
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
      var request = ++asked;
      pending = null;
      title.textContent = action === "clear" ? "Clear checkpoints?" : "Discard uncommitted work?";
      text.textContent = "Reading what would be deleted…";
      showRefused([], 0);
      okButton.textContent = action === "clear" ? "Clear checkpoints" : "Discard uncommitted";
      okButton.disabled = true;
      dialog.showModal();
      view.post(action + "/preview", {
        dag_id: data.dag_id, task_id: data.task_id, run_id: data.run_id, map_index: data.map_index
      }).then(function (answer) {
        if (request !== asked) { return; }
        if (answer.status !== 200) {
          text.textContent = "Cannot tell what would be deleted (HTTP " + answer.status + "): " +
            view.detailOf(answer.body) + " Nothing was deleted.";
          return;
        }
        var preview = answer.body.preview;
        text.textContent = preview.description;
        showRefused(answer.body.refused_records || [], answer.body.refused_record_count || 0);
        if (!preview.nothing_to_do) {
          pending = { action: action, epoch: preview.epoch };
          okButton.disabled = false;
        }
      }).catch(function (err) {
        if (request !== asked) { return; }
        text.textContent = "Cannot tell what would be deleted: " + err + ". Nothing was deleted.";
      });
    });
  });

  dialog.addEventListener("close", function () {
    asked++;  // an answer still on its way is for a dialog that is gone
    if (dialog.returnValue === "confirm" && pending) { run(pending.action, pending.epoch); }
    pending = null;
  });
})();
