"""A person's path through the Checkpoints view, in headless Chromium against a real API server.

Log in on Airflow's login page, open the task instance's Checkpoints tab, compare what
it shows with the store, clear through the confirmation dialog, and check the store
and the audit log. Screenshots go to ``test-output/ui/``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_ckpt_provider.display.units import human_bytes
from airflow_ckpt_provider.store import open_store
from tests.cli.sample_store import fill_store
from tests.support.api_server import DAG_ID, MAPPED_DAG, MAPPED_TASK, PASSWORDS, SPARK_TASK, ApiServer

pytestmark = [pytest.mark.browser, pytest.mark.airflow]

OUTPUT = Path(__file__).resolve().parents[2] / "test-output" / "ui"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

if not Path(CHROMEDRIVER).exists():
    pytest.skip(
        "chromedriver not installed (Debian: apt-get install chromium chromium-driver)", allow_module_level=True
    )

from selenium import webdriver  # noqa: E402 - only once the driver is known to exist
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="ckpt-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,1100",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def log_in(driver: WebDriver, server: ApiServer, user: str) -> None:
    wait = WebDriverWait(driver, 60)
    driver.get(f"{server.base_url}/auth/login")
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "input[name=username]"))).send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(PASSWORDS[user] + Keys.ENTER)
    wait.until(lambda d: "/auth/login" not in d.current_url)
    assert "_token" in {c["name"] for c in driver.get_cookies()}


def text_of(driver: WebDriver, testid: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, f"[data-testid={testid}]").text).strip()


def test_clear_from_the_task_instance_view(ui_server: ApiServer, browser: WebDriver) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = f"browser_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root = ui_server.default_store_path(run_id)
    store = fill_store(root.as_uri(), (ui_server.home / "out" / run_id).as_uri(), partitions=3)
    progress = store.inspection.progress()
    wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))

    log_in(browser, ui_server, "admin")
    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=keys-done]")))

    # The numbers on screen are the store's.
    assert text_of(browser, "store-uri") == store.uri
    assert text_of(browser, "keys-done") == f"{progress.keys_done:,}" == "150"
    assert text_of(browser, "sealed-partitions") == str(progress.sealed_partitions) == "3"
    assert text_of(browser, "expected-partitions") == str(progress.expected_partitions) == "4"
    assert text_of(browser, "files") == str(progress.files)
    assert text_of(browser, "bytes") == f"{human_bytes(progress.bytes)}, {progress.rows:,} rows"
    assert text_of(browser, "committed") == "no"
    bar = browser.find_element(By.CSS_SELECTOR, "[data-testid=progress-bar]")
    assert bar.get_attribute("aria-valuenow") == "75"
    rows = browser.find_elements(By.CSS_SELECTOR, "[data-testid=checkpoints] tbody tr")
    assert len(rows) == 3
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "checkpoints-task-view.png"))

    # Clear: the dialog says what goes, then the action runs.
    browser.switch_to.frame(frame)
    browser.find_element(By.CSS_SELECTOR, "[data-testid=clear-button]").click()
    dialog = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid=confirm-dialog]")))
    # The dialog reads what would be deleted when it opens; Delete is enabled once that is shown.
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=confirm-ok]")))
    assert not browser.find_element(By.CSS_SELECTOR, "[data-testid=confirm-refused]").is_displayed()
    message = text_of(browser, "confirm-text")
    assert "delete all 3 checkpoint(s)" in message and "reprocesses all 150 key(s)" in message
    assert "3 file(s)" in message
    out_uri = (ui_server.home / "out" / run_id).as_uri()
    assert f"Output files are deleted only under: {out_uri}." in message  # the declared output root
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "checkpoints-clear-confirmation.png"))
    browser.switch_to.frame(frame)
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-ok]").click()
    wait.until(lambda d: text_of(d, "action-result").startswith("Done"))
    assert "3 checkpoint(s) and 3 file(s) deleted" in text_of(browser, "action-result")

    # The store is empty and the audit log names the user.
    after = open_store(root.as_uri())
    assert after.inspection.list_checkpoints() == [] and after.inspection.progress().keys_done == 0
    [entry] = ui_server.audit_entries(run_id)
    assert (entry["event"], entry["owner"], entry["task_id"]) == ("checkpoints.clear", "admin", SPARK_TASK)
    assert entry["extra"]["deleted_checkpoints"] == 3

    # The page reloads itself and shows the empty store.
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=keys-done]") and text_of(d, "keys-done") == "0")
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "checkpoints-after-clear.png"))

    # Airflow's own Audit Log tab of the task instance lists the clear.
    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/events")
    wait.until(lambda d: "checkpoints.clear" in d.find_element(By.TAG_NAME, "body").text)
    browser.save_screenshot(str(OUTPUT / "task-audit-log.png"))


def test_the_dialog_lists_the_records_the_guard_refuses_before_anything_is_deleted(
    ui_server: ApiServer, browser: WebDriver
) -> None:
    """A record naming a file on the API server's host: the Discard dialog names it (read when the
    dialog opens, not with the page), Cancel deletes nothing, Discard deletes the store's own
    uncommitted output and the named file survives."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = f"browser_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root = ui_server.default_store_path(run_id)
    out = ui_server.home / "out" / run_id
    store = fill_store(root.as_uri(), out.as_uri(), partitions=2)
    victim = ui_server.home / "victims-browser" / run_id / "important.txt"
    victim.parent.mkdir(parents=True)
    victim.write_text("do not delete")
    poisoned = str(uuid.uuid4())
    record = {"checkpoint_id": poisoned, "epoch": 1, "paths": [victim.as_uri()]}
    store.blobs.put(f"attempts/{poisoned}/intents/0000.json", json.dumps(record).encode())
    wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))

    log_in(browser, ui_server, "admin")
    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=keys-done]")))
    assert poisoned not in browser.page_source  # the page itself never reads intent records

    def open_dialog() -> WebElement:
        browser.find_element(By.CSS_SELECTOR, "[data-testid=discard-button]").click()
        dialog = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid=confirm-dialog]")))
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid=confirm-refused]")))
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=confirm-ok]")))
        return dialog

    dialog = open_dialog()
    refused = text_of(browser, "confirm-refused")
    assert refused.startswith("1 record(s) name what no deletion may touch"), refused
    assert poisoned in refused and victim.as_uri() in refused
    message = text_of(browser, "confirm-text")
    assert "delete 2 uncommitted checkpoint(s)" in message and "2 file(s)" in message
    assert "Also 1 unsealed leftover(s)" in message
    assert f"Output files are deleted only under: {out.as_uri()}." in message
    assert dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-ok]").is_enabled()
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "checkpoints-discard-refused-records.png"))
    browser.switch_to.frame(frame)

    # Opening the dialog and cancelling changes nothing.
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-cancel]").click()
    wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, "[data-testid=confirm-dialog]")))
    assert len(open_store(root.as_uri()).inspection.list_checkpoints()) == 2 and len(list(out.iterdir())) == 2
    assert ui_server.audit_entries(run_id) == []

    dialog = open_dialog()
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-ok]").click()
    wait.until(lambda d: text_of(d, "action-result").startswith("Done"))
    result = text_of(browser, "action-result")
    # The poisoned record's directory is an unsealed leftover: deleted with the store's records.
    assert "3 checkpoint(s) and 2 file(s) deleted" in result and "1 record(s) named files outside" in result
    assert victim.read_text() == "do not delete" and list(out.iterdir()) == []
    [entry] = ui_server.audit_entries(run_id)
    assert entry["event"] == "checkpoints.discard_uncommitted"
    assert any(poisoned in line for line in entry["extra"]["refused_records"])


def test_dag_view_and_viewer_cannot_clear(ui_server: ApiServer, browser: WebDriver) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = f"browser_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    root = ui_server.default_store_path(run_id)
    fill_store(root.as_uri(), (ui_server.home / "out" / run_id).as_uri(), partitions=2)
    wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))

    log_in(browser, ui_server, "viewer")
    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/plugin/dag-checkpoints")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    browser.switch_to.frame(frame)
    row = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f"tr[data-run-id='{run_id}']")))
    assert "100" in row.text and "2 / 4" in row.text
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "checkpoints-dag-view.png"))

    browser.switch_to.frame(frame)
    row.find_element(By.CSS_SELECTOR, "[data-testid=open-task]").click()  # the whole UI goes to the task's tab
    browser.switch_to.default_content()
    wait.until(lambda d: f"/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints" in d.current_url)
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=read-only]")))
    assert not browser.find_element(By.CSS_SELECTOR, "[data-testid=clear-button]").is_enabled()
    assert len(open_store(root.as_uri()).inspection.list_checkpoints()) == 2


def test_the_tab_url_has_no_unfilled_placeholder_and_a_mapped_tab_shows_its_own_store(
    ui_server: ApiServer, browser: WebDriver
) -> None:
    """Airflow fills ``{MAP_INDEX}`` in a tab's href on a mapped instance's page only: the iframe
    of an unmapped task must not carry it, and a mapped instance's tab must still show the store
    of its own map index (taken from the page that framed it)."""
    run_id = f"browser_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(run_id)
    fill_store(ui_server.default_store_path(run_id).as_uri(), (ui_server.home / "out" / run_id).as_uri())
    ti_params = {"dag_id": DAG_ID, "run_id": run_id, "task_id": SPARK_TASK}
    mapped_run = f"browser_{uuid.uuid4().hex[:8]}"
    ui_server.trigger_run(mapped_run, MAPPED_DAG)
    base = ui_server.default_store_path(mapped_run, MAPPED_TASK, MAPPED_DAG)
    for map_index, partitions in ((0, 3), (1, 1)):
        fill_store(
            (base / f"map_index={map_index}").as_uri(),
            (ui_server.home / "out" / mapped_run / str(map_index)).as_uri(),
            partitions=partitions,
            owner=f"{MAPPED_DAG}/{MAPPED_TASK}/{mapped_run}/map_index={map_index}",
        )
    wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))
    log_in(browser, ui_server, "admin")
    # A server's first store read loads pyarrow; on a loaded machine that can outlast the view's
    # 5 s deadline ("cannot be reached"): read once over the API until it answers, then browse.
    with ui_server.client("admin") as client:
        deadline = time.monotonic() + 180
        while "report" not in client.get("/checkpoints/api/task", params=ti_params).json():
            assert time.monotonic() < deadline, "the view never read the store"
            time.sleep(2)

    browser.get(f"{ui_server.base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    source = str(frame.get_attribute("src"))
    assert "{" not in source and "MAP_INDEX" not in source, source
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=keys-done]")))
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-testid=map-index]")
    browser.switch_to.default_content()

    instance = f"dags/{MAPPED_DAG}/runs/{mapped_run}/tasks/{MAPPED_TASK}/mapped/1/plugin/checkpoints"
    browser.get(f"{ui_server.base_url}/{instance}")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Checkpoints]")))
    source = str(frame.get_attribute("src"))
    assert "{" not in source and "MAP_INDEX" not in source, source
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid=keys-done]")))
    assert text_of(browser, "map-index") == "[1]"
    assert text_of(browser, "keys-done") == "50"  # map index 1's store (map index 0 holds 150)
