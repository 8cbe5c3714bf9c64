"""Reprocess from the Checkpoints view in headless Chromium against a real API server.

An editor opens the task instance's tab, asks for a reprocess by two keys, reads the preview in
the dialog (its numbers and files are the store's own dry run), confirms; the store and the
output changed accordingly and the audit log (the plugin's rows and Airflow's own Audit Log tab)
shows the entry. A viewer sees the panel with its buttons disabled. An interrupted reprocess
shows Resume and Abandon; each opens the dialog with the unfinished plan's preview, and Resume
runs it only once confirmed. Screenshots go to ``test-output/ui/``.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, Selection, open_blobs, open_store
from tests.cli.sample_store import fill_store
from tests.plugins.test_browser import OUTPUT, browser, log_in, text_of
from tests.support.api_server import DAG_ID, SPARK_TASK, ApiServer

pytestmark = [pytest.mark.browser, pytest.mark.airflow]

from selenium.webdriver.common.by import By  # noqa: E402 - test_browser skips the module without chromedriver
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

__all__ = ["browser"]  # the fixture, used by the tests below


def _committed_store(server: ApiServer, run_id: str) -> tuple[str, str]:
    root = server.default_store_path(run_id).as_uri()
    out = (server.home / "out" / run_id).as_uri()
    store = fill_store(root, out)
    epoch = store.epochs.current()
    assert epoch is not None
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([out])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    return root, out


def _open_task_view(driver: WebDriver, server: ApiServer, run_id: str) -> None:
    wait = WebDriverWait(driver, 60)
    driver.get(f"{server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    driver.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=reprocess-panel]")))


def test_reprocess_from_the_dialog_with_the_store_s_preview(ui_server: ApiServer, browser: WebDriver) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = f"browser_rp_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root, out = _committed_store(ui_server, run_id)
    keys = ["key-0-4", "key-2-9"]
    expected = open_store(root).reprocessing.preview(Selection(keys=keys))
    wait = WebDriverWait(browser, 60)

    log_in(browser, ui_server, "admin")
    _open_task_view(browser, ui_server, run_id)
    browser.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-button]").click()
    dialog = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid=reprocess-dialog]")))
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-values]").send_keys("\n".join(keys))
    confirm = dialog.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-confirm]")
    assert not confirm.is_enabled()  # no confirmation before a preview
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-preview]").click()
    wait.until(lambda d: text_of(d, "preview-files") not in ("", "-"))

    # The preview's numbers and files are the store's.
    assert text_of(browser, "preview-checkpoints") == str(len(expected.checkpoints)) == "2"
    assert text_of(browser, "preview-keys") == str(expected.keys) == "100"
    assert text_of(browser, "preview-files") == str(len(expected.files)) == "2"
    assert text_of(browser, "preview-bytes") == str(expected.bytes)
    listed = [li.text for li in dialog.find_elements(By.CSS_SELECTOR, "[data-testid=preview-file-list] li")]
    assert sorted(listed) == sorted(f.path for f in expected.files)
    assert "2 checkpoint(s) (2 committed) become pending" in text_of(browser, "preview-text")
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "reprocess-preview-dialog.png"))
    _open_task_frame_again(browser)

    browser.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-confirm]").click()
    wait.until(lambda d: text_of(d, "reprocess-result").startswith("Done"))
    assert "2 file(s) moved to the quarantine" in text_of(browser, "reprocess-result")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=reprocess-history] tbody tr"))
    row = browser.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-history] tbody tr")
    assert "reprocess" in row.text and "in quarantine" in row.text
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "reprocess-done.png"))

    # The store and the output changed as the preview said; the audit log names the user.
    assert open_store(root).inspection.progress().keys_done == 50
    assert {i.key for i in open_blobs(out).list("")} == {"part-00001.parquet"}
    [entry] = [e for e in ui_server.audit_entries(run_id) if e["event"] == "checkpoints.reprocess"]
    assert entry["owner"] == "admin" and entry["extra"]["result"]["moved"] == 2
    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/events")
    wait.until(lambda d: "checkpoints.reprocess" in d.find_element(By.TAG_NAME, "body").text)
    browser.save_screenshot(str(OUTPUT / "reprocess-audit-log.png"))


def _open_task_frame_again(driver: WebDriver) -> None:
    frame = driver.find_element(By.CSS_SELECTOR, "iframe[title=Checkpoints]")
    driver.switch_to.frame(frame)


def test_a_viewer_cannot_reprocess(ui_server: ApiServer, browser: WebDriver) -> None:
    run_id = f"browser_rp_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root, out = _committed_store(ui_server, run_id)
    log_in(browser, ui_server, "viewer")
    _open_task_view(browser, ui_server, run_id)
    assert not browser.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-button]").is_enabled()
    assert not browser.find_element(By.CSS_SELECTOR, "[data-testid=rewind-button]").is_enabled()
    # Forging the request from the page's own origin is refused too.
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch("../api/task/reprocess/preview", {method: "POST", credentials: "same-origin",
          headers: {"Content-Type": "application/json", "X-Requested-With": "x"},
          body: JSON.stringify({dag_id: arguments[0], task_id: arguments[1], run_id: arguments[2],
                                selection: {keys: ["key-0-0"]}})}).then(r => done(r.status));
        """,
        DAG_ID,
        SPARK_TASK,
        run_id,
    )
    assert status == 403
    assert open_store(root).inspection.progress().keys_done == 150 and len(list(open_blobs(out).list(""))) == 3


def test_resume_and_abandon_open_the_unfinished_plan_s_preview_first(ui_server: ApiServer, browser: WebDriver) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = f"browser_rs_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root, out = _committed_store(ui_server, run_id)
    store = open_store(root, trusted_output_roots=[out])
    selection = Selection(commits=[1])
    failpoints.enable("store.reprocess.after_epoch", kind="raise")  # the maintenance epoch opens, nothing moves
    try:
        with pytest.raises(failpoints.InjectedFault):
            store.reprocessing.run(selection, expected=store.reprocessing.preview(selection))
    finally:
        failpoints.disable_all()
    wait = WebDriverWait(browser, 60)

    log_in(browser, ui_server, "admin")
    _open_task_view(browser, ui_server, run_id)
    resume = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid=resume-button]")))
    abandon = browser.find_element(By.CSS_SELECTOR, "[data-testid=abandon-button]")
    dialog = browser.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-dialog]")
    confirm = dialog.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-confirm]")
    for button, name in ((abandon, "Abandon"), (resume, "Resume")):
        button.click()  # the dialog opens on the plan's preview, never on the action
        wait.until(ec.visibility_of(dialog))
        wait.until(lambda d: text_of(d, "preview-files") == "3")
        assert confirm.text == name and confirm.is_enabled()
        listed = [li.text for li in dialog.find_elements(By.CSS_SELECTOR, "[data-testid=preview-file-list] li")]
        assert sorted(listed) == [f"{out}/part-0000{i}.parquet" for i in range(3)]
        assert len(list(open_blobs(out).list(""))) == 3  # nothing ran yet
        if name == "Abandon":
            dialog.find_element(By.CSS_SELECTOR, "[data-testid=reprocess-cancel]").click()
            wait.until(ec.invisibility_of_element(dialog))
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "resume-preview-dialog.png"))
    _open_task_frame_again(browser)

    confirm.click()
    wait.until(lambda d: text_of(d, "reprocess-result").startswith("Done (resume)"))
    assert "3 file(s) moved to the quarantine" in text_of(browser, "reprocess-result")
    assert list(open_blobs(out).list("")) == [] and open_store(root).inspection.progress().keys_done == 0
    assert [e["owner"] for e in ui_server.audit_entries(run_id) if e["event"] == "checkpoints.resume_reprocess"] == [
        "admin"
    ]
