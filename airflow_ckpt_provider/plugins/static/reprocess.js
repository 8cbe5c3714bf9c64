// Reprocess / rewind on the Checkpoints task view: preview (a dry run) first, then the confirmed plan.
// The action sends the preview's fingerprint back; the store refuses if anything changed since.
(function () {
  "use strict";
  var view = window.ckptView;  // from checkpoints.js, loaded first
  var dataNode = document.getElementById("ckpt-data");
  var panel = document.getElementById("reprocess");
  if (!view || !dataNode || !panel) { return; }
  var data = JSON.parse(dataNode.textContent);
  var dialog = document.getElementById("reprocess-dialog");
  var form = document.getElementById("reprocess-form");
  var title = document.getElementById("reprocess-title");
  var previewBox = document.getElementById("reprocess-preview");
  var confirmButton = dialog.querySelector("[data-testid=reprocess-confirm]");
  var resultBox = document.getElementById("reprocess-result");
  var history = panel.querySelector("[data-testid=reprocess-history]");
  var resumeButton = panel.querySelector("[data-testid=resume-button]");
  var abandonButton = panel.querySelector("[data-testid=abandon-button]");
  var mode = "reprocess";  // or "rewind", "undo", "purge"
  var target = null;       // undo / purge: the reprocess's epoch
  var confirmed = null;    // the preview the person is looking at

  function testid(name) { return dialog.querySelector("[data-testid=" + name + "]"); }

  function show(kind, message) { view.show(resultBox, kind, message); }

  function request() {
    var body = { dag_id: data.dag_id, task_id: data.task_id, run_id: data.run_id, map_index: data.map_index,
                 action: mode,
                 delete: form.elements["delete"].checked };
    if (mode === "reprocess") {
      var kind = form.elements["kind"].value;
      var values = form.elements["values"].value.split("\n").map(function (v) { return v.trim(); })
        .filter(function (v) { return v.length > 0; });
      var selection = {};
      if (kind === "epochs" || kind === "commits") {
        selection[kind] = values.map(function (v) { return parseInt(v, 10); });
      } else if (kind === "sealed_after" || kind === "sealed_before") {
        selection[kind] = values[0] || null;
      } else {
        selection[kind] = values;
      }
      body.selection = selection;
    } else if (mode === "rewind") {
      body.to_commit = parseInt(form.elements["to_commit"].value, 10);
    } else {
      body.epoch = target;
    }
    return body;
  }

  function open(newMode, epoch) {
    mode = newMode;
    target = epoch === undefined ? null : epoch;
    confirmed = null;
    confirmButton.disabled = true;
    previewBox.hidden = true;
    document.getElementById("reprocess-select").hidden = mode !== "reprocess";
    document.getElementById("rewind-select").hidden = mode !== "rewind";
    form.elements["delete"].parentNode.hidden = !(mode === "reprocess" || mode === "rewind");
    title.textContent = { reprocess: "Reprocess", rewind: "Rewind", undo: "Undo reprocess " + target,
                          purge: "Purge the quarantine of reprocess " + target,
                          resume: "Resume the unfinished action (as its record says)",
                          abandon: "Abandon the unfinished action (its plan is not run)" }[mode];
    confirmButton.textContent = { reprocess: "Reprocess", rewind: "Rewind", undo: "Undo", purge: "Purge",
                                  resume: "Resume", abandon: "Abandon" }[mode];
    dialog.showModal();
    if (mode !== "reprocess" && mode !== "rewind") { preview(); }
  }

  function preview() {
    confirmButton.disabled = true;
    var body = request();
    view.post("reprocess/preview", body).then(function (answer) {
      previewBox.hidden = false;
      var list = testid("preview-file-list");
      list.textContent = "";
      if (answer.status !== 200 || !answer.body.preview) {
        testid("preview-text").textContent = "Not possible (HTTP " + answer.status + "): " + view.detailOf(answer.body);
        ["preview-checkpoints", "preview-keys", "preview-files", "preview-bytes"].forEach(function (name) {
          testid(name).textContent = "-";
        });
        return;
      }
      var plan = answer.body.preview;
      testid("preview-checkpoints").textContent = String(plan.checkpoints.length);
      testid("preview-keys").textContent = String(plan.keys);
      testid("preview-files").textContent = String(plan.file_count);
      testid("preview-bytes").textContent = String(plan.bytes);
      testid("preview-text").textContent = plan.description.split("\n")[0];
      plan.files.forEach(function (file) {
        var item = document.createElement("li");
        item.textContent = file.path + (file.present ? "" : "  (already missing)");
        list.appendChild(item);
      });
      if (plan.file_count > plan.files.length) {
        var more = document.createElement("li");
        more.textContent = "… and " + (plan.file_count - plan.files.length) + " more";
        list.appendChild(more);
      }
      confirmed = { body: body, fingerprint: plan.fingerprint };
      // A plan naming files outside the DAG's output roots is never run; it can only be abandoned.
      confirmButton.disabled = mode !== "abandon" && (plan.nothing_to_do || plan.refused_paths.length > 0);
      if (plan.refused_paths.length > 0) {
        testid("preview-text").textContent = "Refused: " + plan.refused_paths.length +
          " file(s) outside the DAG's output roots or reached through a symbolic link, e.g. " + plan.refused_paths.slice(0, 3).join(", ");
      }
    }).catch(function (err) {
      testid("preview-text").textContent = "The request failed: " + err;
    });
  }

  function act() {
    if (!confirmed) { return; }
    var body = confirmed.body;
    body.expected = confirmed.fingerprint;
    show("warn", "Working…");
    view.post("reprocess", body).then(function (answer) {
      if (answer.status === 200) {
        var r = answer.body.result || {};
        show("ok", "Done (" + body.action + "): " + (r.checkpoints || 0) + " checkpoint(s), " + (r.keys || 0) +
          " key(s) pending; " + (r.moved || 0) + " file(s) moved to the quarantine, " + (r.deleted || 0) +
          " deleted, " + (r.restored || 0) + " restored, " + (r.purged || 0) + " purged. Audit log entry " +
          answer.body.audit_log_id + ".");
        loadHistory();
      } else {
        show("error", "Not done (HTTP " + answer.status + "): " + view.detailOf(answer.body));
      }
    }).catch(function (err) {
      show("error", "The request failed: " + err + ". Reload to see the store.");
    });
  }

  function loadHistory() {
    var query = "dag_id=" + encodeURIComponent(data.dag_id) + "&run_id=" + encodeURIComponent(data.run_id) +
      "&task_id=" + encodeURIComponent(data.task_id) + "&map_index=" + encodeURIComponent(data.map_index);
    fetch("../api/task/reprocesses?" + query, { credentials: "same-origin" }).then(function (response) {
      return response.json();
    }).then(function (body) {
      var rows = body.reprocesses || [];
      var tbody = history.querySelector("tbody");
      tbody.textContent = "";
      history.hidden = rows.length === 0;
      resumeButton.hidden = !(body.can_edit && rows.some(function (r) { return !r.finished_at; }));
      abandonButton.hidden = resumeButton.hidden;
      rows.forEach(function (r) {
        var tr = document.createElement("tr");
        tr.setAttribute("data-epoch", String(r.epoch));
        var state = !r.finished_at ? "unfinished" : r.undone ? "undone" : r.purged ? "purged" :
          r.mode === "quarantine" ? "in quarantine" : "deleted";
        var what = r.to_commit !== null && r.to_commit !== undefined ? "to commit " + r.to_commit : JSON.stringify(r.selection);
        [String(r.epoch), r.action, what, String(r.checkpoints), String(r.keys), String(r.files), state,
         r.requested_by || "", r.finished_at || ""].forEach(function (text, i) {
          var td = document.createElement("td");
          if (i === 0 || (i >= 3 && i <= 5)) { td.className = "num"; }
          td.textContent = text;
          tr.appendChild(td);
        });
        var actions = document.createElement("td");
        if (body.can_edit && r.finished_at && state === "in quarantine") {
          [["undo", "Undo"], ["purge", "Purge"]].forEach(function (pair) {
            var button = document.createElement("button");
            button.type = "button";
            button.textContent = pair[1];
            button.setAttribute("data-testid", pair[0] + "-" + r.epoch);
            button.addEventListener("click", function () { open(pair[0], r.epoch); });
            actions.appendChild(button);
          });
        }
        tr.appendChild(actions);
        tbody.appendChild(tr);
      });
    }).catch(function () { /* history is informative only */ });
  }

  panel.querySelector("[data-testid=reprocess-button]").addEventListener("click", function () { open("reprocess"); });
  panel.querySelector("[data-testid=rewind-button]").addEventListener("click", function () { open("rewind"); });
  // Resume and abandon are confirmed like the action itself: the plan's preview, then its fingerprint.
  resumeButton.addEventListener("click", function () { open("resume"); });
  abandonButton.addEventListener("click", function () { open("abandon"); });
  testid("reprocess-preview").addEventListener("click", preview);
  // Any change after the preview: the person must look at a new preview before confirming.
  ["input", "change"].forEach(function (type) {
    form.addEventListener(type, function () { confirmed = null; confirmButton.disabled = true; });
  });
  dialog.addEventListener("close", function () {
    if (dialog.returnValue === "confirm") { act(); }
  });
  loadHistory();
})();
