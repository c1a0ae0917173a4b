"""The console in a real browser (headless Chromium through Selenium) against a real broker:
create a topic, produce, browse, watch a group's lag fall, reset it, delete the topic.
Each page's screenshot is saved under tests/artifacts/console/."""

from __future__ import annotations

import json
import re

from console_process import ARTIFACTS
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from samsa import Consumer, Producer, TopicPartition
from waiting import wait_until

TOPIC = "browser-topic"
GROUP = "browser-group"
PER_PARTITION = 40


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def text(driver, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def is_stale(element) -> bool:
    try:
        element.tag_name
    except StaleElementReferenceException:
        return True
    return False


def click_to_load(driver, element) -> None:
    """Click something that loads a new page, and return once that page is the document and loaded:
    the old page's root went stale and the new one's readyState is complete. Anything read after
    this comes from the new page, never from the one being replaced."""
    old_root = driver.find_element(By.TAG_NAME, "html")
    element.click()
    wait_until(lambda: is_stale(old_root), "the old page to be replaced", interval=0.05)
    wait_until(lambda: driver.execute_script("return document.readyState") == "complete", "the new page to load",
               interval=0.05)


def reload_until(driver, predicate, what: str, timeout: float = 30.0):
    def check():
        driver.refresh()
        return predicate()
    return wait_until(check, what, timeout=timeout, interval=0.3)


def test_console_in_a_browser(console, console_broker, browser):
    d = browser
    # ---- the cluster page, with live figures from the broker's /metrics
    d.get(console.url + "/")
    assert "alive" in text(d, "#brokers")
    assert "yes" in text(d, "#brokers")  # broker 0 is the controller
    wait_until(lambda: re.fullmatch(r"\d+\.\d", text(d, "#live-messages-in")), "live figures", timeout=30)
    shot(d, "1-cluster")

    # ---- create a topic through the form
    d.get(console.url + "/topics")
    d.find_element(By.ID, "new-topic-name").send_keys(TOPIC)
    d.find_element(By.ID, "new-topic-partitions").send_keys("2")
    click_to_load(d, d.find_element(By.ID, "create"))
    wait_until(lambda: f"/topics/{TOPIC}?notice=" in d.current_url, "the topic page")
    assert f"Created topic {TOPIC}." in text(d, "#notice")
    assert len(d.find_elements(By.CSS_SELECTOR, "#partitions tr")) == 3  # header + 2 partitions
    shot(d, "2-topic-created")

    # ---- produce, then browse
    with Producer({"bootstrap.servers": console_broker.bootstrap}) as producer:
        for p in (0, 1):
            for i in range(PER_PARTITION):
                producer.send(TOPIC, json.dumps({"n": i, "partition": p}).encode(), key=f"key-{i}".encode(),
                              partition=p, headers=[("origin", b"browser-test")])
        producer.flush()
    # The live figures: the first rate after the records went in is above 0 (scrapes of /metrics, 2 s apart).
    d.get(console.url + "/")
    wait_until(lambda: float(text(d, "#live-messages-in")) > 0, "messages in per second above 0", timeout=30)
    shot(d, "3-cluster-live")
    d.get(console.url + f"/topics/{TOPIC}")
    reload_until(d, lambda: "40" in [c.text for c in d.find_elements(By.CSS_SELECTOR, "#partitions td.num")],
                 "the log end offsets on the topic page")
    shot(d, "3-topic-with-records")
    click_to_load(d, d.find_element(By.ID, "browse"))
    form = d.find_element(By.ID, "browse-form")
    Select(form.find_element(By.NAME, "partition")).select_by_value("1")
    newest = form.find_element(By.NAME, "newest")
    if newest.is_selected():
        newest.click()
    form.find_element(By.NAME, "offset").send_keys("5")
    limit = form.find_element(By.NAME, "limit")
    limit.clear()
    limit.send_keys("10")
    Select(form.find_element(By.NAME, "decode")).select_by_visible_text("json")
    click_to_load(d, d.find_element(By.ID, "read"))
    wait_until(lambda: d.find_elements(By.ID, "messages"), "the messages")
    values = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#messages td.value")]
    assert len(values) == 10
    assert json.loads(values[0]) == {"n": 5, "partition": 1}
    assert json.loads(values[-1]) == {"n": 14, "partition": 1}
    assert "origin: browser-test" in text(d, "#messages")
    shot(d, "4-messages")
    d.get(console.url + f"/topics/{TOPIC}/messages?partition=0&newest=1&limit=3&decode=text&filter=")
    assert [json.loads(v.text)["n"] for v in d.find_elements(By.CSS_SELECTOR, "#messages td.value")] == [39, 38, 37]
    d.get(console.url + f"/topics/{TOPIC}/messages?partition=0&offset=500")
    assert "Offset 500 is past the end of partition 0" in text(d, "#error")

    # ---- a group that has read part of the topic: its lag, then a consumer catches up
    group_page = console.url + f"/groups/{GROUP}"
    first = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": GROUP, "max.poll.records": 10,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        first.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        while not first.poll(2.0):
            pass
        first.commit()
    finally:
        first.close()
    d.get(group_page)
    lag_before = int(text(d, "#total-lag"))
    assert 0 < lag_before < 2 * PER_PARTITION
    shot(d, "5-group-lagging")

    catching_up = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": GROUP,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        catching_up.subscribe([TOPIC])
        seen = 0
        while seen < lag_before:
            seen += len(catching_up.poll(2.0))
        catching_up.commit()
        reload_until(d, lambda: text(d, "#total-lag") == "0", "the lag to fall to 0")
        assert text(d, "#state") == "Stable"
        shot(d, "6-group-caught-up")
        # An active group's offsets are not reset.
        Select(d.find_element(By.ID, "reset-choice")).select_by_value("to-earliest")
        click_to_load(d, d.find_element(By.ID, "reset-execute"))
        wait_until(lambda: d.find_elements(By.ID, "error"), "the refusal")
        assert "can only be reset while the group 'browser-group' is inactive" in text(d, "#error")
        shot(d, "7-reset-refused")
    finally:
        catching_up.close()

    # ---- reset the group, now empty, to the earliest offsets
    wait_until(lambda: d.get(group_page) or text(d, "#state") == "Empty", "the group to be empty", interval=0.3)
    Select(d.find_element(By.ID, "reset-choice")).select_by_value("to-earliest")
    click_to_load(d, d.find_element(By.ID, "reset-preview"))
    wait_until(lambda: d.find_elements(By.ID, "plan"), "the reset plan")
    assert "Reset plan (not applied yet)" in d.page_source
    assert text(d, "#total-lag") == "0"
    Select(d.find_element(By.ID, "reset-choice")).select_by_value("to-earliest")
    click_to_load(d, d.find_element(By.ID, "reset-execute"))
    wait_until(lambda: d.find_elements(By.ID, "reset-done"), "the reset")
    assert text(d, "#total-lag") == str(2 * PER_PARTITION)
    shot(d, "8-group-reset")

    # ---- delete the topic, with confirmation
    d.get(console.url + f"/topics/{TOPIC}")
    click_to_load(d, d.find_element(By.ID, "delete"))
    d.find_element(By.ID, "confirm").send_keys("not-the-name")
    click_to_load(d, d.find_element(By.ID, "confirm-delete"))
    wait_until(lambda: d.find_elements(By.ID, "error"), "the refusal")
    assert "type its name 'browser-topic' exactly" in text(d, "#error")
    d.get(console.url + f"/topics/{TOPIC}/delete")
    shot(d, "9-delete-confirmation")
    d.find_element(By.ID, "confirm").send_keys(TOPIC)
    click_to_load(d, d.find_element(By.ID, "confirm-delete"))
    wait_until(lambda: "/topics?notice=" in d.current_url, "the topic list")
    assert f"Deleted topic {TOPIC}." in text(d, "#notice")
    assert TOPIC not in text(d, "#topics")
    shot(d, "10-topic-deleted")

    # ---- a topic that does not exist
    d.get(console.url + "/topics/no-such-topic")
    assert text(d, "#error") == "Topic 'no-such-topic' does not exist."
    assert "Traceback" not in d.page_source
    shot(d, "11-missing-topic")
