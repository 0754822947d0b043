"""The console in a real headless Chromium, against a real broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from headrace.testing import EmbeddedBroker, scaled


@pytest.fixture(scope="module")
def orders(broker: EmbeddedBroker) -> str:
    """A topic of 100 JSON orders with a trace header, and a group 40 records in."""
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(scaled(10))
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(100):
        p.produce(topic, key=f"order-{i}".encode(), value=f'{{"n": {i}}}'.encode(),
                  headers=[("trace", f"t-{i}".encode())])
    p.flush()
    commit(broker, f"{topic}-billing", topic, 40)
    return topic


def commit(broker: EmbeddedBroker, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    c.close()


def committed(broker: EmbeddedBroker, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=scaled(10))[0].offset)
    finally:
        c.close()


def text(browser: webdriver.Chrome, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def test_topics_and_the_message_browser_find_a_record_by_header(
        browser: webdriver.Chrome, console: str, orders: str) -> None:
    browser.get(f"{console}/topics")
    assert orders in text(browser, "#topics")
    browser.get(f"{console}/topics/{orders}")
    assert "Log end" in text(browser, "#partitions") and "100" in text(browser, "#partitions")
    assert "oldest record is" in text(browser, "#window")
    browser.get(f"{console}/topics/{orders}/messages")
    browser.find_element(By.NAME, "header").send_keys("trace=t-77")
    browser.find_element(By.CSS_SELECTOR, "#search button").click()
    WebDriverWait(browser, scaled(20)).until(lambda b: "trace" in b.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
    assert len(rows) == 1
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "77" and cells[3] == "order-77" and '"n": 77' in cells[5]
    assert "1 found in 100 records scanned" in text(browser, "#summary")


def test_bad_input_gets_a_clear_message(browser: webdriver.Chrome, console: str,
                                        orders: str) -> None:
    browser.get(f"{console}/topics/no-such-topic")
    assert "'no-such-topic' does not exist" in text(browser, "#error")
    browser.get(f"{console}/topics/{orders}/messages?offset=abc")
    assert "offset must be a whole number, not 'abc'" in text(browser, "#error")
    browser.get(f"{console}/groups/no-such-group")
    assert "unknown group 'no-such-group'" in text(browser, "#error")
    assert "Traceback" not in browser.page_source


def test_group_lag_plot_and_offset_reset_with_a_dry_run(
        browser: webdriver.Chrome, console: str, orders: str, broker: EmbeddedBroker) -> None:
    group = f"{orders}-billing"
    browser.get(f"{console}/groups/{group}")
    assert "total lag 60 records" in browser.page_source
    lag_row = browser.find_elements(By.CSS_SELECTOR, "#lag tr")[1].text
    assert "40 100 60" in lag_row and " s " in lag_row + " "  # lag in time too
    # The plot fills as the console samples (every 0.5 s here).
    deadline = time.monotonic() + scaled(20)
    while not browser.find_elements(By.CSS_SELECTOR, "#lag-plot polyline"):
        assert time.monotonic() < deadline, "no lag plot"
        time.sleep(0.5)
        browser.refresh()
    png = browser.find_element(By.CSS_SELECTOR, "#lag-plot svg").screenshot_as_png
    assert len(png) > 1000
    # A stuck consumer: its oldest unread record ages until retention (7 days) deletes it.
    assert "falls off the log in 168.0 h at the current trend (producing 0.0/s, consuming " \
        "0.0/s)" in text(browser, "#forecast")
    Select(browser.find_element(By.NAME, "mode")).select_by_visible_text("offset")
    browser.find_element(By.NAME, "value").send_keys("90")
    browser.find_element(By.CSS_SELECTOR, "#reset button").click()
    plan = text(browser, "#plan")  # (implicit wait: the plan is on the next page only)
    assert "Dry run" in plan and "40 90" in plan
    assert committed(broker, group, orders) == 40  # a dry run changes nothing
    browser.find_element(By.ID, "confirm").click()
    WebDriverWait(browser, scaled(20)).until(lambda b: b.find_elements(By.ID, "done"))
    assert committed(broker, group, orders) == 90
    assert "total lag 10 records" in browser.page_source


@pytest.fixture
def active_group(broker: EmbeddedBroker, orders: str) -> Iterator[str]:
    group = f"{orders}-active-{uuid.uuid4().hex[:4]}"
    stop = threading.Event()
    joined = threading.Event()

    def run() -> None:
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                      "auto.offset.reset": "earliest",
                      "on_commit": lambda *_: None})
        c.subscribe([orders], on_assign=lambda *_: joined.set())
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert joined.wait(scaled(30))
    yield group
    stop.set()
    t.join(scaled(10))


def test_resetting_an_active_group_is_refused(browser: webdriver.Chrome, console: str,
                                              orders: str, active_group: str) -> None:
    browser.get(f"{console}/groups/{active_group}")
    assert "Stable" in text(browser, "#state")
    browser.find_element(By.CSS_SELECTOR, "#reset button").click()  # earliest: dry run
    assert "stop its consumers before applying" in text(browser, "#plan")
    browser.find_element(By.ID, "confirm").click()
    assert "offsets can only be reset while it has no live members" in text(browser, "#error")


def test_live_tail_shows_new_records(browser: webdriver.Chrome, console: str, orders: str,
                                     broker: EmbeddedBroker) -> None:
    browser.get(f"{console}/topics/{orders}/tail")
    time.sleep(scaled(1.5))  # the stream positions at the end first (the machine's pace)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce(orders, key=b"fresh", value=b'{"n": 1000}')
    p.flush()
    WebDriverWait(browser, scaled(20)).until(
        lambda b: "fresh" in b.find_element(By.ID, "tail").text)
    assert "1 new records" in text(browser, "#status")
