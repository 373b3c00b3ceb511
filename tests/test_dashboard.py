"""The web dashboard in a real headless Chromium: it shows the queue, with the events
before the load, its rates and its live workers, follows the feed live, rides out a
server restart, tells the user about a gap, retries and cancels tasks, and shows a
sharded queue's shards with their feeds merged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from playwright.sync_api import Browser, Dialog, Locator, Page, expect, sync_playwright

from helpers import lease_one, record_of
from serve_support import Server as ServeProcess
from taskq import App, UpstreamFailed, chain, group
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit
from taskq.processes import spawn, stop_all, taskq_command
from taskq.rates import RateLimit
from taskq.registry import MAX_LISTED, Presence, read_workers
from taskq.registry import register as register_worker
from taskq.results import Failure
from taskq.schedules import Schedule, make_schedule
from taskq.settings import Settings, Simulation, child_environment
from taskq.shards import Layout, register, slot_of
from taskq.tools.embedded import EmbeddedRedis, free_port
from waiting import wait_until

pytestmark = pytest.mark.browser

# The shards whose feeds one page follows (shards.js's MAX_FEEDS).
MAX_FEEDS = 3
# The workflows the Workflows panel lists (flows.js's MAX_FLOWS).
MAX_LISTED_FLOWS = 20

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
QUEUE = "web"
# What every action and every expect waits: a loaded machine (the suite's other worker
# checking a model, a small CI runner) can take seconds to draw what a test expects.
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)
DOCS = Path(__file__).resolve().parents[1] / "docs"
TIME_LIMIT_ERROR = "taskq.errors.TimeLimitExceeded"


def by_id(page: Page, name: str) -> Locator:
    return page.get_by_test_id(name)


def rows(page: Page, name: str) -> Locator:
    return page.locator(f"[data-testid={name}]")


class Server:
    """One `taskq serve` process on a fixed port, which can be killed and started again."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = taskq_command("serve", "--port", str(self.port), "--queue", QUEUE)
        self.process = spawn(argv, self.env, str(self.log))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise AssertionError(f"taskq serve did not come up:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: the page sees its stream drop, as in a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            stop_all([self.process])


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: install Debian's chromium to run the browser tests"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    """A fresh page for the dashboard, closed before its server stops (else the server
    waits out its graceful shutdown for the open stream); any script error fails the test."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark")
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    watch_csp(tab, errors)
    yield tab
    context.close()
    assert errors == [], f"script errors or CSP violations on the page: {errors}"


def watch_csp(tab: Page, errors: list[str]) -> None:
    """Report every Content-Security-Policy violation on `tab` into `errors`."""
    tab.add_init_script("document.addEventListener('securitypolicyviolation', e => "
                        "console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`))")
    tab.on("console", lambda message: errors.append(message.text)
           if "CSP violation" in message.text or "Content Security Policy" in message.text
           else None)


@pytest.fixture
def env(redis_server: EmbeddedRedis, tmp_path: Path) -> dict[str, str]:
    settings = Settings.from_env({}, redis_url=redis_server.url, api_token="")
    return child_environment(settings, Simulation(ledger_path=str(tmp_path / "ledger.db")))


@pytest.fixture
def server(env: dict[str, str], tmp_path: Path, client: redis.Redis) -> Iterator[Server]:
    serve = Server(env, tmp_path / "serve.log")
    serve.start()
    yield serve
    serve.stop()


@pytest.fixture
def queue(client: redis.Redis) -> Broker:
    """The one queue the module's dashboard server shows (its name is in the URL)."""
    return Broker(client, QUEUE)


def open_dashboard(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/?queue={QUEUE}")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")


def event_seqs(page: Page) -> list[int]:
    seqs: list[str] = rows(page, "event-row").evaluate_all("rows => rows.map(r => r.dataset.seq)")
    return [int(s) for s in seqs]


def test_page_shows_queued_tasks(page: Page, server: Server, queue: Broker) -> None:
    for i in range(5):
        queue.enqueue(f"queued-{i}")
    response = page.goto(f"{server.url}/?queue={QUEUE}")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    open_dashboard(page, server)
    expect(by_id(page, "count-ready")).to_have_text("5")
    for kind in ("leased", "delayed", "dead"):
        expect(by_id(page, f"count-{kind}")).to_have_text("0")
    expect(by_id(page, "queue-select")).to_have_value(QUEUE)
    # The events the counts reflect are listed from the start.
    expect(rows(page, "event-row")).to_have_count(5)


def test_the_event_list_opens_with_the_last_events_before_the_load_counted_once(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue_many([NewTask(f"early-{i:02}") for i in range(60)])
    for _ in range(2):
        leased = queue.lease("test-worker", 30)
        assert leased is not None and queue.ack(*leased)
    open_dashboard(page, server)  # the log holds 64 events
    listed = rows(page, "event-row")
    expect(listed).to_have_count(50)
    assert event_seqs(page) == list(range(64, 14, -1)), "the last 50, newest first"
    expect(listed.first).to_have_attribute("data-type", "completed")
    expect(by_id(page, "count-ready")).to_have_text("58")
    expect(by_id(page, "count-leased")).to_have_text("0")

    queue.enqueue("after-load")
    expect(listed.first).to_have_attribute("data-task-id", "after-load")
    expect(by_id(page, "count-ready")).to_have_text("59")
    expect(listed).to_have_count(51)
    leased = queue.lease("test-worker", 30)
    assert leased is not None and queue.ack(*leased)
    expect(by_id(page, "count-ready")).to_have_text("58")
    expect(listed).to_have_count(53)
    expect(by_id(page, "count-leased")).to_have_text("0")
    seqs = event_seqs(page)
    assert seqs == sorted(seqs, reverse=True) and len(seqs) == len(set(seqs))


def test_heartbeats_are_hidden_from_the_event_list_unless_asked_for(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("long")
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    for _ in range(3):
        assert queue.heartbeat(*leased, 30)
    open_dashboard(page, server)
    toggle = by_id(page, "hide-heartbeats")
    expect(toggle).to_be_checked()
    beats = page.locator("[data-testid=event-row][data-type=heartbeat]")
    others = page.locator("[data-testid=event-row]:not([data-type=heartbeat])")
    expect(beats).to_have_count(3)
    expect(others).to_have_count(2)
    expect(beats.locator("visible=true")).to_have_count(0)
    expect(others.locator("visible=true")).to_have_count(2)
    assert queue.heartbeat(*leased, 30)
    expect(beats).to_have_count(4)
    expect(beats.locator("visible=true")).to_have_count(0)

    toggle.uncheck()
    expect(beats.locator("visible=true")).to_have_count(4)
    # The choice is kept by this browser.
    page.reload()
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(toggle).not_to_be_checked()
    expect(beats.locator("visible=true")).to_have_count(4)
    toggle.check()
    expect(beats.locator("visible=true")).to_have_count(0)

    # However many heartbeats come, the other events stay listed.
    for _ in range(250):
        queue.heartbeat(*leased, 30)
    queue.enqueue("after-the-beats")
    expect(others.first).to_have_attribute("data-task-id", "after-the-beats")
    expect(beats).to_have_count(200)
    expect(others.locator("visible=true")).to_have_count(3)
    expect(page.locator("[data-testid=event-row][data-type=enqueued][data-task-id=long]")
           ).to_be_visible()


def test_the_totals_show_the_last_minutes_rates_and_follow_new_work(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("bad", max_retries=0)
    queue.enqueue_many([NewTask(f"ok-{i}") for i in range(6)])
    leased = queue.lease("test-worker", 30)
    assert leased is not None and queue.fail(*leased, error="it broke").status == "dead"
    for _ in range(3):
        leased = queue.lease("test-worker", 30)
        assert leased is not None and queue.ack(*leased)
    open_dashboard(page, server)
    expect(by_id(page, "total-completed")).to_have_text("3")
    expect(by_id(page, "total-failed")).to_have_text("1")
    # The log holds the queue's whole life: the rates are over the whole minute.
    expect(by_id(page, "rates-label")).to_have_text("Last minute")
    expect(by_id(page, "rate-completed")).to_have_text("3.0/min")
    expect(by_id(page, "rate-failed")).to_have_text("1.0/min")

    for _ in range(3):
        leased = queue.lease("test-worker", 30)
        assert leased is not None and queue.ack(*leased)
    expect(by_id(page, "total-completed")).to_have_text("6")
    expect(by_id(page, "rate-completed")).to_have_text("6.0/min")
    expect(by_id(page, "rate-failed")).to_have_text("1.0/min")


def test_page_updates_live_as_a_worker_runs(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    # Names no worker knows can never succeed: all four go to the DLQ at once, their
    # retries left unused.
    queue.enqueue_many(
        [NewTask(f"charge-{i}", max_retries=0, name="billing.charge") for i in (1, 2)]
        + [NewTask(f"refund-{i}", max_retries=3, name="billing.refund") for i in (1, 2)]
        + [NewTask(f"report-{i}", delay=600, name="reports.nightly") for i in (1, 2, 3)]
        + [NewTask(f"job-{i:02}") for i in range(20)]
    )
    open_dashboard(page, server)
    expect(by_id(page, "count-ready")).to_have_text("24")
    expect(rows(page, "runat-countdown").first).to_have_text(re.compile(r"in \d+m \d\ds"))

    worker_env = dict(env, WORK_SECONDS="0.3", FAIL_RATE="0", LEASE_SECONDS="5",
                      BACKOFF_BASE_SECONDS="60", BACKOFF_MAX_SECONDS="120", POLL_SECONDS="0.2")
    worker = spawn(taskq_command("worker", "--queue", QUEUE, "--concurrency", "2"), worker_env,
                   str(tmp_path / "worker.log"))
    try:
        leased = rows(page, "leased-row")
        expect(leased.first).to_be_visible()
        # A token is the server's milliseconds times 1000 at the least (lua/_common.lua's
        # mint_token): sixteen digits, shown whole, not cut to an ellipsis.
        token = leased.first.get_by_test_id("lease-token")
        expect(token).to_have_text(re.compile(r"^\d{16}$"))
        assert token.evaluate("cell => cell.scrollWidth <= cell.clientWidth")
        expect(leased.first.get_by_test_id("lease-countdown")).to_have_text(
            re.compile(r"^\d\.\ds$"))
        completed = page.locator("[data-testid=event-row][data-type=completed]")
        expect(completed.nth(3)).to_be_attached()
        shot = page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        if os.environ.get("TASKQ_SCREENSHOT") == "1":
            (DOCS / "dashboard.png").write_bytes(shot)

        expect(by_id(page, "count-ready")).to_have_text("0")
        expect(completed).to_have_count(20)
        expect(by_id(page, "count-leased")).to_have_text("0")
        expect(leased).to_have_count(0)
        expect(by_id(page, "count-dead")).to_have_text("4")
        expect(by_id(page, "count-delayed")).to_have_text("3")
        expect(rows(page, "dlq-row").first).to_contain_text("UnknownTaskError")
    finally:
        stop_all([worker])
    seqs = event_seqs(page)
    assert len(seqs) == len(set(seqs)), "an event was listed twice"


def test_page_survives_a_server_restart(page: Page, server: Server, queue: Broker) -> None:
    for i in range(3):
        queue.enqueue(f"before-{i}")
    open_dashboard(page, server)
    expect(by_id(page, "count-ready")).to_have_text("3")

    server.kill()
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "reconnecting")
    for i in range(4):
        queue.enqueue(f"during-{i}")
    server.start()

    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(by_id(page, "count-ready")).to_have_text("7")
    expect(rows(page, "event-row")).to_have_count(7)
    assert event_seqs(page) == [7, 6, 5, 4, 3, 2, 1], \
        "the events before the load, then the missed ones, each exactly once"
    expect(by_id(page, "gap-notice")).to_be_hidden()


# How many connections a browser opens to one server over HTTP/1.1.
CONNECTIONS = 6


def set_hidden(page: Page, hidden: bool) -> None:
    """Tell the page it was hidden or shown, as switching tabs does (headless Chromium
    keeps every page visible)."""
    page.evaluate("""hidden => {
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
        Object.defineProperty(document, 'visibilityState', {configurable: true,
                              get: () => (hidden ? 'hidden' : 'visible')});
        document.dispatchEvent(new Event('visibilitychange'));
    }""", hidden)


def test_hidden_pages_let_go_of_their_feeds_so_more_pages_than_connections_load(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("first")
    tabs = [page] + [page.context.new_page() for _ in range(CONNECTIONS)]
    # Each tab is opened as the one before it is hidden, as a new tab hides the last.
    for tab in tabs:
        open_dashboard(tab, server)
        expect(by_id(tab, "count-ready")).to_have_text("1")
        set_hidden(tab, True)
    for tab in tabs:
        expect(by_id(tab, "conn-state")).to_have_attribute("data-state", "paused")

    for i in range(3):
        queue.enqueue(f"while-hidden-{i}")
    set_hidden(page, False)
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(by_id(page, "count-ready")).to_have_text("4")
    expect(rows(page, "event-row")).to_have_count(4)
    assert event_seqs(page) == [4, 3, 2, 1], \
        "the events missed while hidden are replayed, each exactly once"
    expect(by_id(page, "gap-notice")).to_be_hidden()
    queue.enqueue("after")
    expect(by_id(page, "count-ready")).to_have_text("5")
    for tab in tabs[1:]:
        tab.close()


def test_a_hidden_sharded_page_lets_go_of_each_shards_feed_and_resumes_them(
    page: Page, server: Server, client: redis.Redis
) -> None:
    shards = sharded(client)
    open_sharded(page, server, shards)
    set_hidden(page, True)
    for shard in shards:
        expect(shard_row(page, shard).get_by_test_id("shard-feed")).to_have_text(
            "paused while hidden")
    shards[1].enqueue("b-hidden")
    shards[2].enqueue("c-hidden")
    set_hidden(page, False)
    for shard in shards:
        expect(shard_row(page, shard)).to_have_attribute("data-state", "live")
    expect(rows(page, "shard-event")).to_have_count(2)
    expect(page.locator("[data-testid=shard-event][data-task-id=b-hidden]")).to_have_count(1)
    expect(page.locator("[data-testid=shard-event][data-task-id=c-hidden]")).to_have_count(1)


def test_page_shows_a_gap_after_a_trim(
    page: Page, server: Server, client: redis.Redis
) -> None:
    # Retention is applied when an event is written, so the writer's setting trims the log.
    short = Broker(client, QUEUE, events_retention=5)
    short.enqueue_many([NewTask(f"early-{i}") for i in range(2)])
    open_dashboard(page, server)
    expect(by_id(page, "count-ready")).to_have_text("2")

    server.kill()
    short.enqueue_many([NewTask(f"late-{i}") for i in range(50)])
    server.start()

    notice = by_id(page, "gap-notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("missed events: trimmed — reloaded a fresh snapshot")
    expect(by_id(page, "count-ready")).to_have_text("52")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")

    short.enqueue("after-gap")
    expect(by_id(page, "count-ready")).to_have_text("53")
    expect(page.locator("[data-testid=event-row][data-task-id=after-gap]")).to_have_count(1)


@pytest.mark.parametrize("ts", [None, "soon", "9" * 30])
def test_an_event_with_no_time_it_can_read_is_listed_and_the_page_goes_live(
    page: Page, server: Server, queue: Broker, client: redis.Redis, ts: str | None
) -> None:
    queue.enqueue("before")
    seq = int(client.incr(queue.keys.seq))
    fields = {"type": "enqueued", "task": "handmade", "state": "pending"}
    client.xadd(queue.keys.events, fields if ts is None else {**fields, "ts": ts},
                id=f"{seq}-0")  # as written by hand
    open_dashboard(page, server)  # the page fails the test on any script error
    listed = page.locator("[data-testid=event-row][data-task-id=handmade]")
    expect(listed.locator("time")).to_have_text("—")
    queue.enqueue("after")
    expect(page.locator("[data-testid=event-row][data-task-id=after]")).to_have_count(1)
    expect(by_id(page, "count-ready")).to_have_text("2")


def test_a_queue_with_no_tasks_yet_says_so_until_its_first_task_then_goes_live(
    page: Page, server: Server, queue: Broker
) -> None:
    page.goto(f"{server.url}/?queue={QUEUE}")
    badge = by_id(page, "conn-state")
    expect(badge).to_have_attribute("data-state", "missing")
    expect(badge).to_have_text("no tasks yet")
    page.wait_for_timeout(1500)  # the browser waits out the notice's retry meanwhile
    expect(badge).to_have_attribute("data-state", "missing")
    queue.enqueue("first")
    expect(badge).to_have_attribute("data-state", "live", timeout=20_000)
    expect(by_id(page, "count-ready")).to_have_text("1")


def test_a_name_no_queue_can_have_is_said_once_and_the_feed_stays_closed(
    page: Page, server: Server
) -> None:
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/events?" in r.url else None)
    page.goto(f"{server.url}/?queue=no%20such%20queue")
    badge = by_id(page, "conn-state")
    expect(badge).to_have_attribute("data-state", "invalid")
    expect(badge).to_have_text("no such queue name")
    expect(badge).to_have_attribute("title", re.compile("queue='no such queue' is not accepted"))
    page.wait_for_timeout(3000)  # the page reopened a failed stream every 2 s
    assert len(asked) == 1, asked
    expect(badge).to_have_attribute("data-state", "invalid")


def focused(page: Page) -> str:
    """The focused element as `<tag> <its row's task id>`, or BODY."""
    return str(page.evaluate("""() => { const a = document.activeElement;
        return a === document.body ? 'BODY'
          : `${a.tagName} ${a.closest('[data-task-id]')?.dataset.taskId}`; }"""))


def test_the_keyboard_focus_stays_on_a_row_the_feed_redraws_and_comes_back_from_a_view(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue_many([NewTask("held-1"), NewTask("held-2")])
    held = [(t.task_id, t.token) for t in queue.lease_many("w", 60, 2).tasks]
    open_dashboard(page, server)
    link = page.locator("[data-testid=leased-row][data-task-id=held-2] a.task-link")
    link.focus()
    assert focused(page) == "A held-2"
    before = int(client_seq(queue))
    for _ in range(3):  # each heartbeat redraws the Leased table
        assert queue.heartbeat_many(held, 60) == [True, True]
        page.wait_for_timeout(300)
    expect(page.locator("[data-testid=event-row][data-type=heartbeat]")).to_have_count(
        int(client_seq(queue)) - before)
    assert focused(page) == "A held-2"
    page.keyboard.press("Enter")
    expect(by_id(page, "task-view")).to_be_visible()
    page.keyboard.press("Escape")
    expect(by_id(page, "task-view")).to_be_hidden()
    assert focused(page) == "A held-2"


def test_a_click_on_a_row_the_feed_redraws_between_press_and_release_opens_its_task(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue_many([NewTask("pressed-1"), NewTask("pressed-2")])
    first = queue.lease_many("w", 60, 1).tasks[0]
    open_dashboard(page, server)
    link = leased_row(page, first.task_id).get_by_test_id("task-link")
    box = link.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    queue.lease_many("w", 60, 1)  # a new row in the table under the press
    expect(by_id(page, "count-leased")).to_have_text("2")
    page.wait_for_timeout(500)  # past the frame that would redraw the table
    expect(rows(page, "leased-row")).to_have_count(1)
    page.mouse.up()

    expect(by_id(page, "task-id")).to_have_text(first.task_id)
    expect(rows(page, "leased-row")).to_have_count(2)
    expect(leased_row(page, "pressed-2").get_by_test_id("lease-countdown")).to_have_text(
        re.compile(r"^\d+\.\ds$"))


def test_a_right_button_press_holds_no_redraw(
    page: Page, server: Server, queue: Broker
) -> None:
    """Its release may go to a context menu, never to the page: the table stayed as it
    was until some later release anywhere."""
    queue.enqueue_many([NewTask("pressed-1"), NewTask("pressed-2")])
    first = queue.lease_many("w", 60, 1).tasks[0]
    open_dashboard(page, server)
    box = leased_row(page, first.task_id).get_by_test_id("task-link").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down(button="right")
    queue.lease_many("w", 60, 1)
    expect(rows(page, "leased-row")).to_have_count(2)


def client_seq(queue: Broker) -> str:
    return str(queue.client.get(queue.keys.seq))


def test_retry_click_moves_a_dead_task_back(page: Page, server: Server, queue: Broker) -> None:
    queue.enqueue("doomed", max_retries=0)
    (leased,) = queue.lease_many("test-worker", 30, 1).tasks
    assert queue.fail(leased.task_id, leased.token, "OSError: disk full").status == "dead"
    open_dashboard(page, server)
    dead_row = page.locator("[data-testid=dlq-row][data-task-id=doomed]")
    expect(dead_row).to_contain_text("OSError: disk full")
    expect(by_id(page, "count-dead")).to_have_text("1")
    expect(by_id(page, "count-ready")).to_have_text("0")

    dead_row.get_by_test_id("retry-button").click()

    expect(dead_row).to_have_count(0)
    expect(by_id(page, "count-ready")).to_have_text("1")
    expect(by_id(page, "count-dead")).to_have_text("0")
    expect(by_id(page, "retry-result")).to_contain_text("doomed")
    record = queue.task("doomed")
    assert record is not None
    assert record.state == "pending"


def test_a_purged_dead_task_leaves_the_dlq(page: Page, server: Server, queue: Broker) -> None:
    queue.enqueue("expired", max_retries=0)
    (leased,) = queue.lease_many("test-worker", 30, 1).tasks
    queue.fail(leased.task_id, leased.token, "ValueError: bad input")
    open_dashboard(page, server)
    expect(rows(page, "dlq-row")).to_have_count(1)

    assert queue.purge(dead_ttl=0.001) == ["expired"]

    expect(rows(page, "dlq-row")).to_have_count(0)
    expect(by_id(page, "count-dead")).to_have_text("0")
    expect(page.locator("[data-testid=event-row][data-type=purged]")).to_have_count(1)


def test_a_cookie_of_another_app_does_not_lock_the_page_out(
    browser: Browser, env: dict[str, str], tmp_path: Path, queue: Broker
) -> None:
    token = "dashboard-test-token-42"
    secured = Server(dict(env, TASKQ_API_TOKEN=token), tmp_path / "secured.log")
    secured.start()
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    try:
        queue.enqueue("one")
        tab = context.new_page()
        tab.goto(f"{secured.url}/?token={token}")
        expect(by_id(tab, "conn-state")).to_have_attribute("data-state", "live")
        # Cookies are shared by every port of a host; this one is not a valid
        # `name=value` for Python's SimpleCookie, which then dropped the whole header.
        tab.evaluate("document.cookie = 'pref=dark mode; path=/'")
        queue.enqueue("two")
        tab.reload()
        expect(by_id(tab, "conn-state")).to_have_attribute("data-state", "live")
        expect(by_id(tab, "count-ready")).to_have_text("2")
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        assert cookies == {"taskq_token": token, "pref": "dark mode"}
    finally:
        context.close()
        secured.stop()


# -- the workers --------------------------------------------------------------------------

# The panel's reload period (workers.js's WORKERS_MS) and the workers' lease below.
WORKERS_RELOAD_S = 2.0
WORKER_LEASE_S = 1.0


def worker_row(page: Page, process: subprocess.Popen[bytes]) -> Locator:
    return page.locator(f"[data-testid=worker-row][data-pid='{process.pid}']")


def test_the_workers_panel_lists_live_workers_and_drops_a_killed_one_within_a_lease(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    # Some work done before the load, for the rates and the events listed.
    queue.enqueue_many([NewTask(f"done-{i}") for i in range(5)]
                       + [NewTask("broken", max_retries=0)])
    for _ in range(6):
        leased = queue.lease("test-worker", 30)
        assert leased is not None
        if leased[0] == "broken":
            queue.fail(*leased, error="ValueError: no such account")
        else:
            queue.ack(*leased)
    queue.enqueue("long")
    open_dashboard(page, server)
    expect(by_id(page, "workers-body")).to_have_text("No live worker on this queue.")

    worker_env = dict(env, WORK_SECONDS="60", FAIL_RATE="0", POLL_SECONDS="0.2",
                      LEASE_SECONDS=str(WORKER_LEASE_S), SHUTDOWN_GRACE_SECONDS="0.5")
    killed = spawn(taskq_command("worker", "--queue", QUEUE, "--concurrency", "3"), worker_env,
                   str(tmp_path / "killed.log"))
    kept: subprocess.Popen[bytes] | None = None
    try:
        row = worker_row(page, killed)
        expect(row.get_by_test_id("worker-slots")).to_have_text("1 / 3")  # it runs `long`
        kept = spawn(taskq_command("worker", "--queue", QUEUE, "--concurrency", "2"),
                     worker_env, str(tmp_path / "kept.log"))
        other = worker_row(page, kept)
        expect(other.get_by_test_id("worker-slots")).to_have_text("0 / 2")
        registered = next(w for w in read_workers(queue)[1] if w.pid == killed.pid)
        expect(row.get_by_test_id("worker-host")).to_have_text(registered.host)
        expect(row.get_by_test_id("worker-pid")).to_have_text(str(killed.pid))
        expect(row.get_by_test_id("worker-tasks")).to_have_text("taskq.simulate")
        expect(row.get_by_test_id("worker-queues")).to_have_text(QUEUE)
        expect(row).to_have_attribute("data-worker-id", registered.worker_id)
        expect(row.get_by_test_id("worker-up")).to_have_text(re.compile(r"^\d+\.\ds$"))
        expect(row.get_by_test_id("worker-beat")).to_have_text(re.compile(r"^0\.\ds ago$"))
        expect(by_id(page, "workers-meta")).to_have_text("2 live · 1 of 5 slots in use")
        expect(rows(page, "worker-row")).to_have_count(2)
        expect(rows(page, "worker-row").first).to_have_attribute("data-pid", str(killed.pid))
        shot = page.screenshot(path=str(tmp_path / "dashboard-workers.png"))
        if os.environ.get("TASKQ_SCREENSHOT") == "1":
            (DOCS / "dashboard-workers.png").write_bytes(shot)

        killed.send_signal(signal.SIGKILL)
        killed.wait(5)
        gone = time.monotonic()
        expect(row).to_have_count(0)
        # Its record expires a lease after its last beat; the panel shows that at its
        # next reload.
        assert time.monotonic() - gone < WORKER_LEASE_S + WORKERS_RELOAD_S + 1.5
        expect(other).to_have_count(1)
        expect(by_id(page, "workers-meta")).to_have_text(re.compile(r"^1 live · \d of 2 slots"))
    finally:
        stop_all([killed] + ([kept] if kept else []))


# -- the task view ---------------------------------------------------------------------


def start_worker(env: dict[str, str], tmp_path: Path, **knobs: str) -> subprocess.Popen[bytes]:
    worker_env = dict(env, WORK_SECONDS="0.2", LEASE_SECONDS="5", POLL_SECONDS="0.2",
                      BACKOFF_BASE_SECONDS="60", BACKOFF_MAX_SECONDS="120", **knobs)
    return spawn(taskq_command("worker", "--queue", QUEUE), worker_env,
                 str(tmp_path / "worker.log"))


def task_event_types(page: Page) -> list[str]:
    types: list[str] = rows(page, "task-event").evaluate_all(
        "rows => rows.map(r => r.dataset.type)")
    return types


def test_a_task_link_opens_its_view_which_shows_the_result_live(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue("job-0")  # the queue exists, so the page's feed opens live
    open_dashboard(page, server)
    queue.enqueue("job-1")
    link = page.locator("[data-testid=event-row][data-task-id=job-1] [data-testid=task-link]")
    link.click()
    assert page.url.endswith(f"/?queue={QUEUE}#task=job-1")
    task_view = by_id(page, "task-view")
    expect(task_view).to_be_visible()
    expect(by_id(page, "task-id")).to_have_text("job-1")
    expect(by_id(page, "task-state")).to_have_text("pending")
    expect(by_id(page, "task-result")).to_be_hidden()
    expect(rows(page, "task-event")).to_have_count(1)

    worker = start_worker(env, tmp_path, FAIL_RATE="0")
    try:
        expect(by_id(page, "task-state")).to_have_text("completed")
        result = by_id(page, "task-result")
        expect(result).to_be_visible()
        # The run's token, as its one lease minted it (a clock-sized number), whole.
        token = record_of(queue, "job-1").fencing_token
        expect(result).to_have_text(
            f'{{\n  "outcome": "no charge",\n  "token": {token},\n  "attempt": 1\n}}')
        expect(by_id(page, "task-record")).to_contain_text("Attempts1 (retries 0 of 3)")
        expect(by_id(page, "task-record")).to_contain_text(f"Token{token}")
        expect(by_id(page, "task-error")).to_be_hidden()
        assert task_event_types(page)[0] == "enqueued"
        assert task_event_types(page)[-1] == "completed"
        assert "leased" in task_event_types(page)
        shot = task_view.screenshot(path=str(tmp_path / "dashboard-task.png"))
        if os.environ.get("TASKQ_SCREENSHOT") == "1":
            (DOCS / "dashboard-task.png").write_bytes(shot)
    finally:
        stop_all([worker])

    by_id(page, "task-close").click()
    expect(task_view).to_be_hidden()
    assert "#" not in page.url


def test_the_task_route_shows_a_dead_tasks_traceback(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue("doomed", max_retries=0)
    page.goto(f"{server.url}/?queue={QUEUE}#task=doomed")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(by_id(page, "task-state")).to_have_text("pending")

    worker = start_worker(env, tmp_path, FAIL_RATE="1")
    try:
        expect(by_id(page, "task-state")).to_have_text("dead")
        expect(by_id(page, "task-error")).to_have_text(
            "taskq.tools.simulation.SimulatedFailure: simulated failure (FAIL_RATE=1.0)")
        traceback = by_id(page, "task-traceback")
        expect(traceback).to_contain_text("Traceback (most recent call last):")
        expect(traceback).to_contain_text('raise SimulatedFailure(f"simulated failure')
        expect(by_id(page, "task-result")).to_be_hidden()
        expect(rows(page, "task-event").last).to_have_attribute("data-type", "failed")
    finally:
        stop_all([worker])

    # The DLQ row links to the same view.
    page.goto(f"{server.url}/?queue={QUEUE}")
    expect(by_id(page, "task-view")).to_be_hidden()
    page.locator("[data-testid=dlq-row][data-task-id=doomed] [data-testid=task-link]").click()
    expect(by_id(page, "task-traceback")).to_contain_text("SimulatedFailure")


def test_the_task_view_shows_a_result_as_text_and_a_missing_task_as_a_message(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("markup")
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    markup = '<img src=x data-injected=1><script>window.owned = 1</script>'
    assert queue.ack("markup", leased[1], json.dumps({"html": markup}))
    page.goto(f"{server.url}/?queue={QUEUE}#task=markup")
    result = by_id(page, "task-result")
    expect(result).to_have_text(json.dumps({"html": markup}, indent=2))
    expect(page.locator("[data-injected]")).to_have_count(0)
    assert page.evaluate("window.owned") is None

    # Past 2^53 a browser's JSON.parse rounds an integer: the view shows the stored one.
    queue.enqueue("huge")
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    assert queue.ack("huge", leased[1], json.dumps({"id": 2**64 + 1, "ratio": 0.1}))
    page.evaluate("window.location.hash = 'task=huge'")
    expect(result).to_have_text('{\n  "id": 18446744073709551617,\n  "ratio": 0.1\n}')

    page.evaluate("window.location.hash = 'task=nosuch'")
    expect(by_id(page, "task-message")).to_have_text("no task 'nosuch' on this queue")
    expect(by_id(page, "task-record")).to_be_hidden()
    queue.enqueue("nosuch")  # its enqueued event reloads the open view
    expect(by_id(page, "task-state")).to_have_text("pending")


def test_text_a_handler_wrote_shows_its_bidirectional_and_control_characters_as_marks(
    page: Page, server: Server, queue: Broker
) -> None:
    # An override would show "report\u202efdp.exe" as "reportexe.pdf"; an isolate left
    # open would reorder what follows it on the line; a NUL showed as nothing, a carriage
    # return split the value over two lines.
    spoof = "report\u202efdp.exe \u2067rest\x00\r\nend"
    marked = "report[U+202E]fdp.exe [U+2067]rest[U+0000][U+000D]\nend"
    queue.enqueue("spoofed", max_retries=0)
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    assert queue.progress(*leased, 0.5, spoof)
    open_dashboard(page, server)
    event = page.locator("[data-testid=event-row][data-type=progress][data-task-id=spoofed]")
    expect(event).to_contain_text(marked)
    assert queue.fail(*leased, error=f"ValueError: {spoof}").status == "dead"
    dead = page.locator("[data-testid=dlq-row][data-task-id=spoofed]")
    expect(dead).to_contain_text(marked)
    assert "\u202e" not in dead.inner_text()
    expect(dead.locator("td.error")).to_have_attribute("title", f"ValueError: {marked}")

    dead.get_by_test_id("task-link").click()
    expect(by_id(page, "task-error")).to_have_text(f"ValueError: {marked}")
    expect(page.locator("[data-testid=task-view] .progress-message")).to_have_text(marked)
    assert "\u2067" not in by_id(page, "task-view").inner_text()


def test_the_workers_panel_says_how_many_live_workers_it_does_not_list(
    page: Page, server: Server, queue: Broker
) -> None:
    """A queue lists at most 1,000 workers: the panel called them all that were live."""
    queue.enqueue("job-0")
    for n in range(MAX_LISTED + 5):
        register_worker(queue, Presence(worker_id=f"w-{n}", host="box", pid=n + 1,
                                 queues=(queue.queue,), concurrency=2, tasks=("t",),
                                 version="0.1.0"), in_hand=0, ttl=60)
    open_dashboard(page, server)
    expect(by_id(page, "workers-meta")).to_have_text(
        "1000 live · 0 of 2000 slots in use · 5 more not listed")


def test_an_error_with_no_message_is_named_by_its_type_alone(
    page: Page, server: Server, queue: Broker
) -> None:
    """Shown as "app.Boom: ": the record's message is empty for `raise Boom()`."""
    queue.enqueue("mute", max_retries=0)
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    failure = Failure("app.Boom", "", "Traceback ...", "Boom:  (at app.py:3 in f)")
    assert queue.fail(*leased, error=failure).status == "dead"
    page.goto(f"{server.url}/?queue={QUEUE}#task=mute")
    expect(by_id(page, "task-error")).to_have_text("app.Boom")


def record_value(page: Page, label: str) -> Locator:
    """The task view's value for `label` in its record."""
    return page.locator(f"[data-testid=task-record] dt:text-is('{label}') + dd")


def test_the_event_list_and_the_task_view_show_a_tasks_priority(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("job-0")  # the queue exists, so the page's feed opens live
    open_dashboard(page, server)
    queue.enqueue("urgent", priority=9)
    queue.enqueue("plain")
    urgent = page.locator("[data-testid=event-row][data-task-id=urgent]")
    plain = page.locator("[data-testid=event-row][data-task-id=plain]")
    expect(urgent.get_by_test_id("priority-badge")).to_have_text("priority 9")
    expect(plain).to_have_count(1)
    expect(plain.get_by_test_id("priority-badge")).to_have_count(0)

    urgent.get_by_test_id("task-link").click()
    expect(by_id(page, "task-state")).to_have_text("pending")
    expect(record_value(page, "Priority")).to_have_text("9")
    enqueued = page.locator("[data-testid=task-event][data-type=enqueued]")
    expect(enqueued.get_by_test_id("priority-badge")).to_have_text("priority 9")

    page.evaluate("window.location.hash = 'task=plain'")
    expect(by_id(page, "task-id")).to_have_text("plain")
    expect(record_value(page, "Priority")).to_have_text("5 (default)")
    expect(enqueued).to_have_count(1)
    expect(enqueued.get_by_test_id("priority-badge")).to_have_count(0)


# -- schedules and time limits -----------------------------------------------------------

DASH_APP = '''
import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path
import taskq

app = taskq.App()

@app.periodic(every=timedelta(seconds=1), policy="all", name="heartbeat")
@app.task("beat")
def beat() -> None:
    pass

@app.periodic(cron="0 3 * * *", tz="Europe/Paris", policy="skip", name="nightly")
@app.task("report")
def report() -> None:
    pass

@app.task("stuck", max_retries=0, time_limit=0.3)
async def stuck() -> None:
    await asyncio.sleep(30)

@app.task("slow", max_retries=1, time_limit=0.3)
async def slow() -> None:
    await asyncio.sleep(30)

# Runs until it hears of its cancel, says so in a file, then returns once the test has
# looked (DASH_DIR/release exists).
@app.task("linger", max_retries=0)
def linger() -> None:
    here = Path(os.environ["DASH_DIR"])
    deadline = time.monotonic() + 60
    while not taskq.current_task().cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    (here / "heard").touch()
    while not (here / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
'''


def start_app_worker(env: dict[str, str], tmp_path: Path) -> subprocess.Popen[bytes]:
    """A `taskq worker` process running DASH_APP on the page's queue (the app's own, as
    TASKQ_QUEUE makes it: its schedules fire there)."""
    (tmp_path / "dash_app.py").write_text(DASH_APP)
    worker_env = dict(env, TASKQ_QUEUE=QUEUE, LEASE_SECONDS="5", POLL_SECONDS="0.2",
                      BACKOFF_BASE_SECONDS="60",
                      BACKOFF_MAX_SECONDS="120", PYTHONPATH=str(tmp_path), DASH_DIR=str(tmp_path))
    return spawn(taskq_command("worker", "--queue", QUEUE, "--app", "dash_app:app",
                               "--concurrency", "2"), worker_env, str(tmp_path / "worker.log"))


def schedule_row(page: Page, name: str) -> Locator:
    return page.locator(f"[data-testid=schedule-row][data-schedule={name}]")


def test_the_schedules_panel_shows_what_workers_fire_and_follows_each_tick(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue("job-0")  # the queue exists, so the page's feed opens live
    open_dashboard(page, server)
    expect(by_id(page, "schedules-body")).to_contain_text("No worker has fired a schedule")

    worker = start_app_worker(env, tmp_path)
    try:
        heartbeat = schedule_row(page, "heartbeat")
        expect(heartbeat).to_have_attribute("data-definition", "current")
        cells = heartbeat.locator("td")
        expect(cells).to_have_text(["heartbeat", "beat", "every 0:00:01", "all",
                                    re.compile(r"\d+\.\ds ago"), re.compile(r"in 0\.\ds|due"),
                                    ""])
        nightly = schedule_row(page, "nightly")
        expect(nightly.locator("td")).to_have_text([
            "nightly", "report", "cron '0 3 * * *' (Europe/Paris)", "skip",
            # Next 03:00 in Paris: hours away, or minutes in the hour before it.
            re.compile(r"ago$"), re.compile(r"^in (\d+h \d\dm|\d+m \d\ds|\d+\.\ds)$"), ""])
        expect(page.locator("[data-testid=definition-note]")).to_have_count(0)

        # Each tick's task moves the last tick on, with no reload of the page.
        last = heartbeat.get_by_test_id("last-tick")
        first = last.get_attribute("data-since")
        assert first is not None
        expect(last).not_to_have_attribute("data-since", first)
        later = int(last.get_attribute("data-since") or 0)
        assert later > int(first) and later % 1000 == 0
        expect(page.locator("[data-testid=event-row][data-task-id^='sched:heartbeat:']")
               .first).to_be_attached()
    finally:
        stop_all([worker])
    record = queue.schedule_state("heartbeat")
    assert record is not None and record[0] >= later


def test_the_schedules_panel_says_when_a_definition_or_a_tick_is_not_what_workers_fire(
    page: Page, server: Server, queue: Broker, client: redis.Redis
) -> None:
    def every(name: str, seconds: int) -> Schedule:
        return make_schedule(name=name, task=f"jobs.{name}", cron=None,
                             every=timedelta(seconds=seconds), tz=None, args=(), kwargs={},
                             policy="latest", grace=timedelta(minutes=1), max_retries=3)

    for name in ("changed", "unknown", "forgotten"):
        queue.fire(every(name, 3600))
    # What a worker of a taskq that keeps no definitions leaves: a new version beside
    # the older description, or a version alone; and a schedule no worker fires now.
    client.hset(queue.keys.schedules, "version:changed", "0123456789abcdef")
    client.hdel(queue.keys.schedules, "definition:unknown")
    client.hset(queue.keys.schedules, "last:forgotten", queue.server_time_ms() - 7_300_000)
    open_dashboard(page, server)

    changed = schedule_row(page, "changed")
    expect(changed.get_by_test_id("definition-note")).to_have_text("older definition")
    expect(changed).to_contain_text("jobs.changed")
    unknown = schedule_row(page, "unknown")
    expect(unknown.get_by_test_id("definition-note")).to_have_text("no definition")
    expect(unknown.locator("td").nth(5)).to_have_text("—")
    late = schedule_row(page, "forgotten").get_by_test_id("next-tick")
    # Interval ticks fall on the epoch's hour marks, so how late depends on the clock.
    expect(late).to_have_text(re.compile(r"^due (\d+h \d\dm|\d+m \d\ds) ago$"))
    expect(late).to_have_attribute("data-urgency", "late")
    expect(schedule_row(page, "changed").get_by_test_id("next-tick")).to_have_attribute(
        "data-urgency", "ok")


def test_a_schedule_no_worker_fires_any_more_is_forgotten_by_its_button(
    page: Page, server: Server, queue: Broker, client: redis.Redis
) -> None:
    for name in ("alive", "gone"):
        queue.fire(make_schedule(name=name, task=f"jobs.{name}", cron=None,
                                 every=timedelta(hours=1), tz=None, args=(), kwargs={},
                                 policy="all", grace=timedelta(minutes=1), max_retries=3))
    # A last tick two hours back: its next tick is over an hour overdue.
    client.hset(queue.keys.schedules, "last:gone", queue.server_time_ms() - 7_300_000)
    open_dashboard(page, server)

    expect(schedule_row(page, "alive").get_by_test_id("forget-schedule")).to_have_count(0)
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    schedule_row(page, "gone").get_by_test_id("forget-schedule").click()
    expect(page.get_by_test_id("forget-result")).to_contain_text("schedule 'gone' forgotten")
    expect(schedule_row(page, "gone")).to_have_count(0)
    expect(schedule_row(page, "alive")).to_have_count(1)
    assert asked and "Forget schedule gone?" in asked[0]
    assert queue.schedule_state("gone") is None
    assert queue.schedule_state("alive") is not None


def test_a_dismissed_forget_sends_nothing(
    page: Page, server: Server, queue: Broker, client: redis.Redis
) -> None:
    queue.fire(make_schedule(name="gone", task="jobs.gone", cron=None,
                             every=timedelta(hours=1), tz=None, args=(), kwargs={},
                             policy="all", grace=timedelta(minutes=1), max_retries=3))
    client.hset(queue.keys.schedules, "last:gone", queue.server_time_ms() - 7_300_000)
    open_dashboard(page, server)
    page.once("dialog", lambda dialog: dialog.dismiss())
    schedule_row(page, "gone").get_by_test_id("forget-schedule").click()
    page.wait_for_timeout(300)  # what a sent request would take to land
    expect(schedule_row(page, "gone").get_by_test_id("forget-schedule")).to_be_enabled()
    assert queue.schedule_state("gone") is not None


def test_a_run_stopped_at_its_time_limit_is_marked_in_every_row_and_the_task_view(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue("stuck-1", name="stuck", max_retries=0)
    queue.enqueue("slow-1", name="slow", max_retries=1)
    queue.enqueue("nameless-1", name="no.such.task")
    open_dashboard(page, server)

    worker = start_app_worker(env, tmp_path)
    try:
        expect(by_id(page, "count-dead")).to_have_text("2")
        expect(by_id(page, "count-delayed")).to_have_text("1")
    finally:
        stop_all([worker])

    stuck = page.locator("[data-testid=dlq-row][data-task-id=stuck-1]")
    expect(stuck.get_by_test_id("time-limit-badge")).to_have_text("time limit")
    expect(stuck.get_by_test_id("error-type")).to_have_text(TIME_LIMIT_ERROR)
    expect(stuck).to_contain_text("ran past its time limit of 0.3s")
    nameless = page.locator("[data-testid=dlq-row][data-task-id=nameless-1]")
    expect(nameless.get_by_test_id("error-type")).to_have_text("taskq.errors.UnknownTaskError")
    expect(nameless.get_by_test_id("time-limit-badge")).to_have_count(0)
    slow = page.locator("[data-testid=delayed-row][data-task-id=slow-1]")
    expect(slow.get_by_test_id("time-limit-badge")).to_be_visible()
    failed = page.locator("[data-testid=event-row][data-type=failed]")
    expect(failed).to_have_count(3)
    expect(failed.get_by_test_id("time-limit-badge")).to_have_count(2)

    # A fresh load shows the same from the snapshot alone.
    page.reload()
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(page.locator("[data-testid=dlq-row] [data-testid=time-limit-badge]")).to_have_count(1)
    expect(page.locator("[data-testid=delayed-row] [data-testid=time-limit-badge]")
           ).to_have_count(1)

    stuck.get_by_test_id("task-link").click()
    expect(by_id(page, "task-state")).to_have_text("dead")
    view = by_id(page, "task-view")
    expect(view.locator("#task-error-part [data-testid=time-limit-badge]")).to_be_visible()
    expect(by_id(page, "task-error")).to_contain_text(f"{TIME_LIMIT_ERROR}: task stuck-1")
    expect(view.locator("[data-testid=task-event][data-type=failed] "
                        "[data-testid=time-limit-badge]")).to_have_count(1)
    page.evaluate("window.location.hash = 'task=nameless-1'")
    expect(by_id(page, "task-error")).to_contain_text("UnknownTaskError")
    expect(view.locator("[data-testid=time-limit-badge]")).to_have_count(0)


# -- cancellation --------------------------------------------------------------------------

# The dark theme's --cancelled, which the browser fixture's context uses.
CANCELLED_COLOR = "rgb(201, 154, 180)"


def test_cancel_in_the_task_view_and_the_dlq_ends_tasks_live(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("later", delay=3600, name="reports.nightly")
    queue.enqueue("doomed", max_retries=0)
    (leased,) = queue.lease_many("test-worker", 30, 1).tasks
    assert queue.fail(leased.task_id, leased.token, "OSError: disk full").status == "dead"
    open_dashboard(page, server)
    expect(by_id(page, "total-cancelled")).to_have_text("0")
    expect(by_id(page, "total-dead")).to_have_text("1")
    expect(by_id(page, "count-delayed")).to_have_text("1")

    page.locator("[data-testid=delayed-row][data-task-id=later] [data-testid=task-link]").click()
    expect(by_id(page, "task-state")).to_have_text("delayed")
    button = by_id(page, "task-cancel")
    button.click()

    expect(by_id(page, "task-cancel-result")).to_have_text("cancelled")
    state = by_id(page, "task-state")
    expect(state).to_have_text("cancelled")
    expect(state).to_have_css("color", CANCELLED_COLOR)
    expect(button).to_be_hidden()
    expect(by_id(page, "task-record")).to_contain_text("Cancelled")
    last = rows(page, "task-event").last
    expect(last).to_have_attribute("data-type", "cancelled")
    expect(last).to_contain_text("from delayed")
    expect(rows(page, "delayed-row")).to_have_count(0)
    expect(by_id(page, "count-delayed")).to_have_text("0")
    listed = page.locator("[data-testid=event-row][data-type=cancelled][data-task-id=later]")
    expect(listed).to_have_count(1)
    expect(listed.locator(".state")).to_have_css("color", CANCELLED_COLOR)
    expect(by_id(page, "total-cancelled")).to_have_text("1")

    by_id(page, "task-close").click()
    dead_row = page.locator("[data-testid=dlq-row][data-task-id=doomed]")
    # The DLQ's own route: it cancels only a task still dead, not one revived meanwhile.
    with page.expect_request(lambda r: "/api/dlq/doomed/cancel" in r.url):
        dead_row.get_by_test_id("cancel-button").click()
    expect(dead_row).to_have_count(0)
    expect(by_id(page, "count-dead")).to_have_text("0")
    expect(by_id(page, "cancel-result").last).to_have_text("doomed: cancelled")
    expect(by_id(page, "total-cancelled")).to_have_text("2")
    expect(by_id(page, "total-dead")).to_have_text("1")
    for task_id in ("later", "doomed"):
        record = queue.task(task_id)
        assert record is not None and record.state == "cancelled", task_id


def test_cancel_of_a_running_task_is_requested_then_done_when_its_handler_returns(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue("linger-1", name="linger")
    open_dashboard(page, server)
    worker = start_app_worker(env, tmp_path)
    try:
        running = page.locator("[data-testid=leased-row][data-task-id=linger-1]")
        running.get_by_test_id("task-link").click()
        expect(by_id(page, "task-state")).to_have_text("running")
        by_id(page, "task-cancel").click()

        expect(by_id(page, "task-cancel-result")).to_have_text(
            "cancel requested: the worker stops it at its next heartbeat")
        expect(by_id(page, "task-cancel-requested")).to_have_text("cancel requested")
        expect(by_id(page, "task-cancel")).to_be_hidden()
        expect(running).to_have_attribute("data-cancel-requested", "true")
        expect(running.get_by_test_id("cancel-requested-badge")).to_be_visible()
        expect(page.locator("[data-testid=event-row][data-type=cancel_requested]")
               ).to_have_count(1)

        # The handler has heard of it and waits for the test: the task still runs, and
        # a fresh load marks it from the snapshot alone.
        wait_until((tmp_path / "heard").exists, 20, "the handler to hear the cancel")
        page.reload()
        expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
        expect(running.get_by_test_id("cancel-requested-badge")).to_be_visible()
        expect(by_id(page, "task-state")).to_have_text("running")
        expect(by_id(page, "task-cancel-requested")).to_be_visible()
        expect(by_id(page, "total-cancelled")).to_have_text("0")

        (tmp_path / "release").touch()
        expect(by_id(page, "task-state")).to_have_text("cancelled")
        expect(running).to_have_count(0)
        expect(by_id(page, "count-leased")).to_have_text("0")
        expect(by_id(page, "task-cancel-requested")).to_be_hidden()
        expect(by_id(page, "task-record")).to_contain_text("Cancel requested")
        types = task_event_types(page)
        assert types[0] == "enqueued" and types[-1] == "cancelled", types
        assert types.index("leased") < types.index("cancel_requested"), types
        expect(rows(page, "task-event").last).to_contain_text("from running")
        expect(by_id(page, "total-cancelled")).to_have_text("1")
    finally:
        stop_all([worker])
    record = queue.task("linger-1")
    assert record is not None and record.state == "cancelled" and record.result is None


def test_a_task_waiting_for_its_rate_limit_slot_is_marked_on_load_and_live(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.rate_limits = (RateLimit("jobs.slow", 1 / 3600),)  # one start an hour
    queue.enqueue_many([NewTask(f"slow-{i}", name="jobs.slow") for i in range(2)])
    queue.enqueue("retried", delay=3600)
    assert [t.task_id for t in queue.lease_many("w", 30, 5).tasks] == ["slow-0"]
    open_dashboard(page, server)
    waiting = page.locator("[data-testid=delayed-row][data-task-id=slow-1]")
    expect(waiting.get_by_test_id("rate-limit-badge")).to_have_text("rate limit")
    other = page.locator("[data-testid=delayed-row][data-task-id=retried]")
    expect(other).to_be_visible()
    expect(other.get_by_test_id("rate-limit-badge")).to_have_count(0)
    queue.enqueue("slow-2", name="jobs.slow")
    assert queue.lease_many("w", 30, 5).tasks == []  # its slot is an hour out too
    live = page.locator("[data-testid=delayed-row][data-task-id=slow-2]")
    expect(live.get_by_test_id("rate-limit-badge")).to_be_visible()
    # Redeployed without the limit: a starting worker lifts it, and each waiting task's
    # `rescheduled` event brings its run-at in from an hour out to now.
    queue.rate_limits = ()
    assert queue.lift_rate_limits(["jobs.slow"]).left == 0
    for task_id, row in (("slow-1", waiting), ("slow-2", live)):
        record = queue.task(task_id)
        assert record is not None
        expect(row.get_by_test_id("runat-countdown")).to_have_attribute(
            "data-deadline", str(record.run_at))
        expect(row.get_by_test_id("rate-limit-badge")).to_be_visible()
    expect(page.locator("[data-testid=delayed-row]")).to_have_count(3)


def limit_row(page: Page, name: str) -> Locator:
    return page.locator(f"[data-testid=limit-row][data-name='{name}']")


def test_the_limits_panel_shows_each_limits_slots_and_waiting_tasks_live(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.concurrency_limits = (ConcurrencyLimit("jobs.export", 2),)
    queue.enqueue_many([NewTask(f"export-{i}", name="jobs.export") for i in range(3)])
    held = {t.task_id: t.token for t in queue.lease_many("w", 30, 5).tasks}
    assert set(held) == {"export-0", "export-1"}
    open_dashboard(page, server)
    row = limit_row(page, "jobs.export")
    expect(row.get_by_test_id("limit-running")).to_have_text("2 / 2")
    expect(row.get_by_test_id("limit-parked")).to_have_text("1")
    expect(row.get_by_test_id("limit-bar")).to_have_class("slots full")
    expect(by_id(page, "limits-meta")).to_have_text("1 limited · 1 waiting for a slot")
    # Parked tasks are pending: counted as ready, as the snapshot and the events agree.
    expect(by_id(page, "count-ready")).to_have_text("1")
    queue.ack("export-0", held["export-0"])
    expect(row.get_by_test_id("limit-running")).to_have_text("1 / 2")
    assert [t.task_id for t in queue.lease_many("w", 30, 5).tasks] == ["export-2"]
    expect(row.get_by_test_id("limit-running")).to_have_text("2 / 2")
    expect(row.get_by_test_id("limit-parked")).to_have_text("0")
    expect(by_id(page, "count-ready")).to_have_text("0")
    types = rows(page, "event-row").evaluate_all("rows => rows.map(r => r.dataset.type)")
    assert "unparked" in types, types


# -- progress ------------------------------------------------------------------------------

# Each run reports how far it is whenever the test moves it on: DASH_DIR/<task id> holds
# the page it may say it has reached, of ten; it returns after the tenth.
PROGRESS_APP = '''
import os
import time
from pathlib import Path
import taskq

app = taskq.App()

@app.task("export.render", max_retries=0)
def render() -> None:
    here = Path(os.environ["DASH_DIR"])
    me = taskq.current_task().task_id
    said, deadline = 0, time.monotonic() + 60
    while said < 10 and time.monotonic() < deadline:
        wanted = int((here / me).read_text() or 0) if (here / me).exists() else 0
        # A report sooner than a quarter second after the last is dropped: say it again.
        if wanted > said and taskq.current_task().progress(wanted / 10,
                                                           f"page {wanted} of 10"):
            said = wanted
        time.sleep(0.02)
'''


# The mark of a row that stands for several reports of a run, before their number.
TIMES = "\N{MULTIPLICATION SIGN}"


def leased_row(page: Page, task_id: str) -> Locator:
    return page.locator(f"[data-testid=leased-row][data-task-id='{task_id}']")


def progress_rows(page: Page, task_id: str) -> Locator:
    return page.locator(f"[data-testid=event-row][data-type=progress][data-task-id='{task_id}']")


def test_a_running_tasks_bar_moves_live_as_its_handler_reports(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path
) -> None:
    queue.enqueue_many([NewTask(f"render-{i}", name="export.render") for i in (1, 2, 3)])
    open_dashboard(page, server)
    (tmp_path / "progress_app.py").write_text(PROGRESS_APP)
    worker_env = dict(env, LEASE_SECONDS="5", POLL_SECONDS="0.2", PYTHONPATH=str(tmp_path),
                      DASH_DIR=str(tmp_path))
    worker = spawn(taskq_command("worker", "--queue", QUEUE, "--app", "progress_app:app",
                                 "--concurrency", "3"), worker_env, str(tmp_path / "worker.log"))
    try:
        first, second = leased_row(page, "render-1"), leased_row(page, "render-2")
        for row in (first, second, leased_row(page, "render-3")):
            expect(row.get_by_test_id("progress-cell")).to_have_text("—")
        (tmp_path / "render-1").write_text("3")
        (tmp_path / "render-2").write_text("5")
        expect(first.get_by_test_id("progress-percent")).to_have_text("30%")
        expect(first.get_by_test_id("progress-message")).to_have_text("page 3 of 10")
        expect(second.get_by_test_id("progress-cell")).to_have_attribute("data-permille", "500")
        (tmp_path / "render-2").write_text("8")
        expect(second.get_by_test_id("progress-percent")).to_have_text("80%")
        expect(by_id(page, "count-leased")).to_have_text("3")
        expect(second.get_by_test_id("lease-countdown")).to_have_text(re.compile(r"^\d\.\ds$"))

        # Listed though heartbeats are hidden; a run's reports in a row are one row.
        expect(by_id(page, "hide-heartbeats")).to_be_checked()
        expect(progress_rows(page, "render-2")).to_have_count(1)
        expect(progress_rows(page, "render-2")).to_be_visible()
        expect(progress_rows(page, "render-2")).to_contain_text("80% · page 8 of 10")
        expect(progress_rows(page, "render-2")).to_have_attribute("data-folded", "2")
        expect(progress_rows(page, "render-2").get_by_test_id("folded")).to_have_text(TIMES + "2")
        expect(progress_rows(page, "render-1").get_by_test_id("folded")).to_be_hidden()
        expect(by_id(page, "workers-meta")).to_have_text("1 live · 3 of 3 slots in use")
        shot = page.screenshot(path=str(tmp_path / "dashboard-progress.png"), full_page=True)
        if os.environ.get("TASKQ_SCREENSHOT") == "1":
            (DOCS / "dashboard-progress.png").write_bytes(shot)

        first.get_by_test_id("task-link").click()
        expect(by_id(page, "task-state")).to_have_text("running")
        bar = by_id(page, "task-progress")
        expect(bar.get_by_test_id("progress-percent")).to_have_text("30%")
        (tmp_path / "render-1").write_text("6")
        expect(bar.get_by_test_id("progress-percent")).to_have_text("60%")
        expect(bar.get_by_test_id("progress-message")).to_have_text("page 6 of 10")
        expect(first.get_by_test_id("progress-percent")).to_have_text("60%")

        for i in (1, 2, 3):
            (tmp_path / f"render-{i}").write_text("10")
        expect(by_id(page, "task-state")).to_have_text("completed")
        expect(bar.get_by_test_id("progress-percent")).to_have_text("100%")
        expect(page.locator("#task-progress-title")).to_have_text("Progress of the last run")
        expect(rows(page, "leased-row")).to_have_count(0)
        expect(by_id(page, "count-leased")).to_have_text("0")
    finally:
        stop_all([worker])


def test_progress_shows_from_the_snapshot_folds_and_starts_at_none_for_a_new_run(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("long", name="rows.import")
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    _, first = leased
    assert queue.progress("long", first, 0.4, "4 of 10 rows")
    open_dashboard(page, server)
    row = leased_row(page, "long")
    expect(row.get_by_test_id("progress-percent")).to_have_text("40%")
    expect(row.get_by_test_id("progress-message")).to_have_text("4 of 10 rows")
    expect(progress_rows(page, "long")).to_contain_text("40% · 4 of 10 rows")

    # A flood of reports is one row; a heartbeat of the run keeps its bar.
    for n in range(1, 301):
        assert queue.progress("long", first, 0.4 + n / 1000, f"{400 + n} of 1000 rows")
    assert queue.heartbeat("long", first, 30)
    assert queue.progress("long", first, 0.75)
    expect(row.get_by_test_id("progress-percent")).to_have_text("75%")
    expect(row.get_by_test_id("progress-message")).to_be_hidden()
    reports = progress_rows(page, "long")
    expect(reports).to_have_count(1)
    expect(reports).to_have_attribute("data-folded", "302")
    expect(reports.get_by_test_id("folded")).to_have_text(TIMES + "302")
    expect(page.locator("[data-testid=event-row][data-type=leased]")).to_be_visible()
    expect(page.locator("[data-testid=event-row][data-type=enqueued]")).to_be_visible()
    assert queue.heartbeat("long", first, 30)
    expect(page.locator("[data-testid=event-row][data-type=heartbeat]")).to_have_count(2)
    expect(row.get_by_test_id("progress-percent")).to_have_text("75%")

    row.get_by_test_id("task-link").click()
    expect(by_id(page, "task-progress").get_by_test_id("progress-percent")).to_have_text("75%")
    folded = page.locator("[data-testid=task-event][data-type=progress]")
    expect(folded).to_have_count(1)
    expect(folded).to_have_attribute("data-folded", "302")
    by_id(page, "task-close").click()

    # Leased again, the task starts with no progress, on the page as in a fresh load.
    assert queue.release("long", first)
    again = queue.lease("test-worker", 30)
    assert again is not None
    _, second = again
    expect(row).to_have_attribute("data-task-id", "long")
    expect(row.locator("td.num.mono")).to_have_text(str(second))
    expect(row.get_by_test_id("progress-cell")).to_have_text("—")
    page.reload()
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    expect(row.get_by_test_id("progress-cell")).to_have_text("—")
    assert queue.progress("long", second, 0.1, "1 of 10 rows")
    expect(row.get_by_test_id("progress-percent")).to_have_text("10%")
    expect(progress_rows(page, "long").first).to_contain_text("10% · 1 of 10 rows")
    expect(progress_rows(page, "long").first.get_by_test_id("folded")).to_be_hidden()
    # A report moves the bar in its row, which stays: a click on its link is not lost.
    drawn = row.element_handle()
    assert queue.progress("long", second, 0.2, "2 of 10 rows")
    expect(row.get_by_test_id("progress-percent")).to_have_text("20%")
    assert drawn.evaluate("node => node.isConnected")


# -- history ---------------------------------------------------------------------------------


def history_ids(page: Page) -> Locator:
    """The ids the history panel lists, top to bottom."""
    return page.locator("[data-testid=history-row] td.id")


# The history panel's reload period (app.js's HISTORY_MS).
HISTORY_RELOAD_MS = 5000


def search_history(page: Page, act: Callable[[], None], shown: list[str]) -> None:
    """Do `act` just after one of the panel's timed reloads, and expect it to list `shown`
    before the next could: a change of the search reloads the panel itself."""
    with page.expect_response(lambda response: "/api/history?" in response.url):
        pass
    act()
    expect(history_ids(page)).to_have_text(shown, timeout=HISTORY_RELOAD_MS - 1500)


def end_some_tasks(queue: Broker) -> None:
    """inv-1 completed, ord-1 dead, ord-2 cancelled, inv-2 completed after one failed
    attempt, in that order; wait-1 still pending."""
    queue.enqueue("inv-1", name="shop.invoice")
    leased = queue.lease("test-worker", 30)
    assert leased is not None and queue.ack(*leased)
    queue.enqueue("ord-1", name="shop.charge", max_retries=0)
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    assert queue.fail(*leased, error="ValueError: no stock").status == "dead"
    queue.enqueue("ord-2", name="shop.charge", delay=3600)
    assert queue.cancel("ord-2").outcome == "cancelled"
    queue.enqueue("inv-2", name="shop.invoice")
    leased = queue.lease("test-worker", 30)
    assert leased is not None
    assert queue.fail(*leased, error="OSError: printer offline", backoff_base=0.001,
                      backoff_max=0.001).status == "retry"
    wait_until(lambda: queue.promote() == ["inv-2"], 5, "the retry to fall due")
    leased = queue.lease("test-worker", 30)
    assert leased is not None and queue.ack(*leased)
    queue.enqueue("wait-1", name="shop.invoice")


def test_the_history_panel_lists_ended_tasks_newest_first_and_searches_them(
    page: Page, server: Server, queue: Broker, tmp_path: Path
) -> None:
    end_some_tasks(queue)
    open_dashboard(page, server)
    listed = history_ids(page)
    expect(listed).to_have_text(["inv-2", "ord-2", "ord-1", "inv-1"])
    expect(rows(page, "history-row").first.locator("td")).to_have_text([
        re.compile(r"ago$"), "inv-2", "shop.invoice", "completed", "1",
        "OSError: printer offline"])
    dead = page.locator("[data-testid=history-row][data-task-id=ord-1]")
    expect(dead.get_by_test_id("history-state")).to_have_text("dead")
    expect(dead).to_contain_text("ValueError: no stock")
    expect(by_id(page, "history-meta")).to_have_text("4 found in the whole log")

    search_history(page, by_id(page, "history-completed").uncheck, ["ord-2", "ord-1"])
    by_id(page, "history-dead").uncheck()
    expect(listed).to_have_text(["ord-2"])
    # The last way of ending left cannot be unticked: the search always asks for one.
    expect(by_id(page, "history-cancelled")).to_be_disabled()
    by_id(page, "history-completed").check()
    expect(by_id(page, "history-cancelled")).to_be_enabled()
    by_id(page, "history-dead").check()
    expect(listed).to_have_text(["inv-2", "ord-2", "ord-1", "inv-1"])

    search_history(page, lambda: by_id(page, "history-prefix").press_sequentially("inv"),
                   ["inv-2", "inv-1"])
    by_id(page, "history-prefix").fill("")
    by_id(page, "history-name").fill("charge")
    expect(listed).to_have_text(["ord-2", "ord-1"])
    by_id(page, "history-prefix").fill("ord-1")
    expect(listed).to_have_text(["ord-1"])
    by_id(page, "history-name").fill("nothing-like-it")
    expect(by_id(page, "history-body")).to_have_text("No ended task matches this search.")
    expect(by_id(page, "history-meta")).to_have_text("0 found in the whole log")
    by_id(page, "history-prefix").fill("")
    by_id(page, "history-name").fill("shop")
    expect(listed).to_have_text(["inv-2", "ord-2", "ord-1", "inv-1"])

    # A task that ends after the load shows at the next reload, with when it ended from
    # the first frame that shows its row.
    leased = queue.lease("test-worker", 30)
    assert leased is not None and queue.ack(*leased)
    drawn = page.wait_for_function(
        "() => { const row = document.querySelector('[data-testid=history-row]');"
        " return row && row.dataset.taskId === 'wait-1' && [row.cells[0].textContent]; }")
    assert re.fullmatch(r"\d+\.\ds ago", drawn.json_value()[0]), drawn.json_value()
    expect(listed).to_have_text(["wait-1", "inv-2", "ord-2", "ord-1", "inv-1"])
    page.evaluate("window.scrollTo(0, 0)")  # typing scrolled the search box into view
    shot = page.screenshot(path=str(tmp_path / "dashboard-history.png"), full_page=True)
    if os.environ.get("TASKQ_SCREENSHOT") == "1":
        (DOCS / "dashboard-history.png").write_bytes(shot)

    dead.get_by_test_id("task-link").click()
    assert page.url.endswith("#task=ord-1")
    expect(by_id(page, "task-state")).to_have_text("dead")
    expect(by_id(page, "task-error")).to_contain_text("no stock")


# -- bulk actions on the DLQ -----------------------------------------------------------------


def fail_for_good(queue: Broker, count: int) -> None:
    """Lease `count` ready tasks, in batches, and fail each for good."""
    while count > 0:
        batch = queue.lease_many("test-worker", 30, min(count, 500)).tasks
        assert batch, "fewer tasks were ready than asked for"
        for task in batch:
            assert queue.fail(task.task_id, task.token, "ValueError: bad row",
                              dead=True).status == "dead"
        count -= len(batch)


def kill(queue: Broker, task_ids: list[str]) -> None:
    queue.enqueue_many([NewTask(task_id) for task_id in task_ids])
    fail_for_good(queue, len(task_ids))


def writes(page: Page) -> list[tuple[str, str | None]]:
    """Every POST the page sends from now on: its path and its X-Taskq-Request header."""
    sent: list[tuple[str, str | None]] = []
    page.on("request", lambda request: sent.append(
        (urlsplit(request.url).path, request.headers.get("x-taskq-request")))
        if request.method == "POST" else None)
    return sent


def answer(page: Page, accept: bool) -> list[str]:
    """Accept or dismiss the page's next dialog; what it asked is appended to the list."""
    asked: list[str] = []

    def reply(dialog: Dialog) -> None:
        asked.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", reply)
    return asked


def test_retry_all_and_delete_all_ask_first_and_act_on_every_dead_task(
    page: Page, server: Server, queue: Broker
) -> None:
    kill(queue, ["d-0", "d-1", "d-2"])
    open_dashboard(page, server)
    sent = writes(page)
    expect(rows(page, "dlq-row")).to_have_count(3)

    asked = answer(page, accept=False)
    by_id(page, "cancel-all").click()
    assert asked == ["Delete all 3 dead tasks from the dead letter queue for good? "
                     "They end cancelled: this cannot be undone."]
    asked = answer(page, accept=True)
    by_id(page, "retry-all").click()
    assert asked == ["Send all 3 dead tasks back to ready, their retries reset?"]
    expect(by_id(page, "bulk-result")).to_have_text("Sent 3 tasks back to ready")
    # The dismissed question sent nothing: the one write is the retry, sent as a write.
    assert sent == [("/api/dlq/retry-all", "1")]
    expect(rows(page, "dlq-row")).to_have_count(0)
    expect(by_id(page, "count-dead")).to_have_text("0")
    expect(by_id(page, "count-ready")).to_have_text("3")
    expect(by_id(page, "retry-all")).to_be_disabled()
    expect(by_id(page, "cancel-all")).to_be_disabled()
    expect(page.locator("[data-testid=event-row][data-type=revived]")).to_have_count(3)
    for task_id in ("d-0", "d-1", "d-2"):
        record = queue.task(task_id)
        assert record is not None and record.state == "pending", task_id

    fail_for_good(queue, 3)
    expect(rows(page, "dlq-row")).to_have_count(3)
    expect(by_id(page, "cancel-all")).to_be_enabled()
    asked = answer(page, accept=False)
    by_id(page, "retry-all").click()
    assert asked == ["Send all 3 dead tasks back to ready, their retries reset?"]
    answer(page, accept=True)
    by_id(page, "cancel-all").click()
    expect(by_id(page, "bulk-result").last).to_have_text(
        "Deleted 3 tasks from the dead letter queue")
    assert sent == [("/api/dlq/retry-all", "1"), ("/api/dlq/cancel-all", "1")]
    expect(rows(page, "dlq-row")).to_have_count(0)
    expect(by_id(page, "count-dead")).to_have_text("0")
    expect(by_id(page, "total-cancelled")).to_have_text("3")
    for task_id in ("d-0", "d-1", "d-2"):
        record = queue.task(task_id)
        assert record is not None and record.state == "cancelled", task_id


def test_a_dlq_past_what_one_press_takes_says_how_many_are_left(
    page: Page, server: Server, queue: Broker
) -> None:
    kill(queue, [f"d-{i:04}" for i in range(1001)])
    open_dashboard(page, server)
    expect(by_id(page, "count-dead")).to_have_text("1,001")

    asked = answer(page, accept=True)
    by_id(page, "retry-all").click()
    assert asked == ["Send the first 1,000 of 1,001 dead tasks back to ready, "
                     "their retries reset?"]
    expect(by_id(page, "bulk-result")).to_have_text(
        "Sent 1,000 tasks back to ready · 1 left: press again")
    expect(by_id(page, "count-dead")).to_have_text("1")
    expect(by_id(page, "count-ready")).to_have_text("1,000")
    expect(rows(page, "dlq-row")).to_have_count(1)

    asked = answer(page, accept=True)
    by_id(page, "retry-all").click()
    assert asked == ["Send the 1 dead task back to ready, their retries reset?"]
    expect(by_id(page, "bulk-result").last).to_have_text("Sent 1 task back to ready")
    expect(by_id(page, "count-dead")).to_have_text("0")
    assert queue.counts().dead == 0


# -- sharded queues ----------------------------------------------------------------------

SHARDED = "mail"


def sharded(client: redis.Redis, queue: str = SHARDED, count: int = 3) -> list[Broker]:
    """The shards of a sharded queue, its layout stored as its first producer stores it,
    each with one task so its feed opens live."""
    layout = Layout.of(queue, count)
    register(client, layout)
    shards = [Broker(client, name) for name in layout.shards]
    for i, shard in enumerate(shards):
        shard.enqueue(f"seed-{i}")
    return shards


def shard_row(page: Page, shard: Broker) -> Locator:
    return page.locator(f"[data-testid=shard-row][data-shard='{shard.queue}']")


def shard_events(page: Page, shard: Broker) -> Locator:
    return page.locator(f"[data-testid=shard-event][data-shard='{shard.queue}']")


def open_sharded(page: Page, server: Server, shards: list[Broker]) -> None:
    """The page on the sharded queue's own name, each shard's feed live."""
    page.goto(f"{server.url}/?queue={shards[0].queue.partition('~')[0]}")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    for shard in shards[:MAX_FEEDS]:
        expect(shard_row(page, shard)).to_have_attribute("data-state", "live")


def test_a_sharded_queue_shows_each_shards_counts_and_its_first_shard(
    page: Page, server: Server, settings: Settings, client: redis.Redis
) -> None:
    shards = sharded(client)
    shards[1].enqueue("later", delay=3600)
    shards[2].enqueue("doomed", max_retries=0, priority=9)
    (doomed,) = shards[2].lease_many("w", 30, 1).tasks
    assert shards[2].fail(doomed.task_id, doomed.token, "it broke").status == "dead"
    app = App(queue=SHARDED, settings=settings, shards=3)

    @app.task("send")
    def send(n: int) -> int:
        return n

    try:
        for n in range(12):
            send.enqueue(n)
    finally:
        app.producer.brokers[0].client.close()
    assert shards[0].lease("w", 30) is not None

    open_sharded(page, server, shards)
    # The sharded queue's own name holds no tasks: the page shows its first shard.
    assert page.url.endswith(f"/?queue={shards[0].queue.replace('~', '%7E')}")
    expect(by_id(page, "queue-select")).to_have_value(shards[0].queue)
    expect(by_id(page, "shards-queue")).to_have_text(SHARDED)
    expect(rows(page, "shard-row")).to_have_count(3)
    for shard in shards:
        counts = shard.counts()
        row = shard_row(page, shard)
        expect(row.get_by_test_id("shard-slot")).to_have_text(str(slot_of(shard.queue)))
        for kind in ("ready", "leased", "delayed", "dead"):
            expect(row.get_by_test_id(f"shard-{kind}")).to_have_text(str(getattr(counts, kind)))
        expect(row.get_by_test_id("shard-feed")).to_have_text("live")
    expect(shard_row(page, shards[0])).to_have_class("current")
    expect(by_id(page, "count-ready")).to_have_text(str(shards[0].counts().ready))
    expect(by_id(page, "count-leased")).to_have_text("1")
    expect(by_id(page, "shards-meta")).to_have_text("3 shards, each followed live")

    shards[1].enqueue("listed")
    expect(rows(page, "shard-event")).to_have_count(1)

    shard_row(page, shards[2]).click()
    expect(by_id(page, "queue-select")).to_have_value(shards[2].queue)
    expect(shard_row(page, shards[2])).to_have_class("current")
    expect(shard_row(page, shards[0])).not_to_have_class("current")
    expect(page.locator("[data-testid=dlq-row][data-task-id=doomed]")).to_contain_text("it broke")
    # Another shard of the same queue keeps the panel as it was, its list too.
    expect(rows(page, "shard-event")).to_have_count(1)
    shards[0].enqueue("after-switch")
    expect(rows(page, "shard-event")).to_have_count(2)


def test_events_of_each_shard_are_merged_in_one_list_tagged_with_their_shard(
    page: Page, server: Server, client: redis.Redis
) -> None:
    shards = sharded(client)
    open_sharded(page, server, shards)
    shards[1].enqueue("b-1")
    shards[2].enqueue("c-1")
    shards[1].enqueue("b-2")

    listed = rows(page, "shard-event")
    expect(listed).to_have_count(3)  # none of the events before the page's load
    for task_id, shard in (("b-1", shards[1]), ("c-1", shards[2]), ("b-2", shards[1])):
        row = page.locator(f"[data-testid=shard-event][data-task-id={task_id}]")
        expect(row).to_have_attribute("data-shard", shard.queue)
        expect(row.get_by_test_id("shard-tag")).to_have_text(shard.queue)
        expect(row).to_have_attribute("data-type", "enqueued")
    expect(shard_events(page, shards[1])).to_have_count(2)
    expect(shard_events(page, shards[2]).locator("[data-testid=task-link]")).to_have_text("c-1")
    expect(shard_row(page, shards[1]).get_by_test_id("shard-ready")).to_have_text("3")
    expect(shard_row(page, shards[2]).get_by_test_id("shard-ready")).to_have_text("2")
    # The main view follows its own shard alone: its one event, from before the load.
    expect(rows(page, "event-row")).to_have_count(1)
    expect(rows(page, "event-row")).to_have_attribute("data-task-id", "seed-0")

    # A task of another shard opens on its shard.
    shard_events(page, shards[2]).get_by_test_id("task-link").click()
    expect(by_id(page, "task-id")).to_have_text("c-1")
    expect(by_id(page, "task-state")).to_have_text("pending")
    expect(by_id(page, "queue-select")).to_have_value(shards[2].queue)
    assert page.url.endswith("#task=c-1")
    expect(listed).to_have_count(3)


def test_a_link_to_a_task_of_a_sharded_queue_opens_it_on_the_shard_holding_it(
    page: Page, server: Server, settings: Settings, client: redis.Redis
) -> None:
    """Whichever of its queue's names the link gives: the whole queue's, which shows its
    first shard, or another shard's."""
    shards = sharded(client)
    app = App(queue=SHARDED, settings=settings, shards=3)

    @app.task("send")
    def send(n: int) -> int:
        return n

    try:
        handles = [send.enqueue(n) for n in range(12)]
    finally:
        app.producer.brokers[0].client.close()
    holding = {h.task_id: s.queue for h in handles for s in shards if s.task(h.task_id)}
    task_id, shard = next((t, s) for t, s in holding.items() if s != shards[0].queue)
    for named in (SHARDED, shards[0].queue):
        page.goto(f"{server.url}/?queue={named}#task={task_id}")
        expect(by_id(page, "task-id")).to_have_text(task_id)
        expect(by_id(page, "task-state")).to_have_text("pending")
        expect(by_id(page, "queue-select")).to_have_value(shard)
        expect(shard_row(page, next(s for s in shards if s.queue == shard))).to_have_class(
            "current")
    # A hash changed by hand to a task of another shard moves the view to that shard.
    other_id, other = next((t, s) for t, s in holding.items() if s != shard)
    page.evaluate(f"window.location.hash = 'task={other_id}'")
    expect(by_id(page, "task-id")).to_have_text(other_id)
    expect(by_id(page, "task-state")).to_have_text("pending")
    expect(by_id(page, "queue-select")).to_have_value(other)


def test_a_gap_on_one_shards_feed_marks_that_shard_alone(
    page: Page, server: Server, client: redis.Redis, tmp_path: Path
) -> None:
    shards = sharded(client)
    open_sharded(page, server, shards)
    for shard in shards:
        shard.enqueue(f"early-{shard.queue.replace('~', '-')}")
    expect(rows(page, "shard-event")).to_have_count(3)
    expect(by_id(page, "total-enqueued")).to_have_text("2")

    server.kill()
    expect(shard_row(page, shards[1])).to_have_attribute("data-state", "reconnecting")
    # Retention is applied when an event is written, so the writer's setting trims the log.
    short = Broker(client, shards[1].queue, events_retention=5)
    short.enqueue_many([NewTask(f"late-{i}") for i in range(50)])
    shards[2].enqueue_many([NewTask(f"late-c-{i}") for i in range(2)])
    server.start()

    trimmed = shard_row(page, shards[1])
    expect(trimmed).to_have_attribute("data-gap", "trimmed")
    expect(trimmed.get_by_test_id("shard-gap")).to_have_text("gap · trimmed")
    expect(trimmed.get_by_test_id("shard-ready")).to_have_text("52")
    expect(page.locator("[data-testid=shard-row][data-gap]")).to_have_count(1)
    gaps = rows(page, "shard-gap-row")
    expect(gaps).to_have_count(1)
    expect(gaps).to_have_attribute("data-shard", shards[1].queue)
    # The other shards resume from their own last ids: each missed event, exactly once.
    expect(shard_events(page, shards[2])).to_have_count(3)
    expect(shard_row(page, shards[2]).get_by_test_id("shard-ready")).to_have_text("4")
    for shard in shards:
        expect(shard_row(page, shard)).to_have_attribute("data-state", "live")
    expect(by_id(page, "gap-notice")).to_be_hidden()  # the main view's shard missed nothing

    short.enqueue("after-gap")
    expect(page.locator("[data-testid=shard-event][data-task-id=after-gap]")).to_have_attribute(
        "data-shard", shards[1].queue)
    seqs = shard_events(page, shards[2]).evaluate_all("rows => rows.map(r => r.dataset.seq)")
    assert sorted(seqs) == ["2", "3", "4"], seqs
    shot = page.screenshot(path=str(tmp_path / "dashboard-shards.png"), full_page=True)
    if os.environ.get("TASKQ_SCREENSHOT") == "1":
        (DOCS / "dashboard-shards.png").write_bytes(shot)


def test_shards_past_the_feeds_a_page_follows_show_their_counts_only(
    page: Page, server: Server, client: redis.Redis
) -> None:
    shards = sharded(client, "wide", MAX_FEEDS + 2)
    open_sharded(page, server, shards)
    # The page's own requests still go through beside its open feeds.
    expect(by_id(page, "count-ready")).to_have_text("1")
    expect(by_id(page, "shards-meta")).to_have_text(
        f"{MAX_FEEDS + 2} shards · the first {MAX_FEEDS} followed live")
    for shard in shards[MAX_FEEDS:]:
        row = shard_row(page, shard)
        expect(row).to_have_attribute("data-state", "off")
        expect(row.get_by_test_id("shard-feed")).to_have_text("not followed")
    shards[-1].enqueue("unfollowed")
    shards[0].enqueue("followed")
    expect(shard_events(page, shards[0])).to_have_count(1)
    expect(rows(page, "shard-event")).to_have_count(1)
    # Any followed shard's event reloads every shard's counts.
    expect(shard_row(page, shards[-1]).get_by_test_id("shard-ready")).to_have_text("2")


def test_a_plain_queue_asks_for_its_shards_once_and_shows_no_panel(
    page: Page, server: Server, queue: Broker
) -> None:
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    queue.enqueue("job-0")
    open_dashboard(page, server)
    queue.enqueue("job-1")
    expect(page.locator("[data-testid=event-row][data-task-id=job-1]")).to_have_count(1)
    expect(by_id(page, "shards-panel")).to_be_hidden()
    assert [url for url in asked if "/api/shards" in url] == [
        f"{server.url}/api/shards?queue={QUEUE}"]
    streams = [url for url in asked if "/events?" in url]
    assert len(streams) == 1, streams
    assert streams[0].startswith(f"{server.url}/events?queue={QUEUE}&"), streams


def test_the_page_shows_the_queue_the_server_was_started_on(
    browser: Browser, env: dict[str, str], tmp_path: Path, client: redis.Redis
) -> None:
    """`taskq serve --queue zz-mine` with other queues that sort first: the page opens on
    zz-mine, keeps it in its URL, and a login link with a token keeps the queue too."""
    Broker(client, "aa-other").enqueue("theirs")
    Broker(client, "zz-mine").enqueue("mine")
    serve = ServeProcess({**env, "TASKQ_API_TOKEN": "s3cret-token-for-the-page"},
                         tmp_path / "mine.log", "--queue", "zz-mine").start()
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    try:
        tab = context.new_page()
        tab.goto(f"{serve.url}/?queue=aa-other&token=s3cret-token-for-the-page")
        expect(tab).to_have_url(f"{serve.url}/?queue=aa-other")
        expect(by_id(tab, "queue-select")).to_have_value("aa-other")
        tab.goto(f"{serve.url}/")
        expect(by_id(tab, "queue-select")).to_have_value("zz-mine")
        expect(tab).to_have_url(f"{serve.url}/?queue=zz-mine")
        expect(tab.locator("[data-testid=event-row][data-task-id=mine]")).to_have_count(1)
        expect(tab.locator("[data-testid=event-row][data-task-id=theirs]")).to_have_count(0)
    finally:
        context.close()
        serve.stop()


# -- workflows ------------------------------------------------------------------------------

FLOW_APP = '''
import os
import time
from pathlib import Path
import taskq

app = taskq.App()

# Returns once the test opens its gate (DASH_DIR/open exists).
@app.task("flow.gate")
def gate(x: int) -> int:
    here = Path(os.environ["DASH_DIR"])
    deadline = time.monotonic() + 60
    while not (here / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return x

@app.task("flow.add")
def add(x: int, y: int = 1) -> int:
    return x + y

@app.task("flow.total")
def total(xs: list[int]) -> int:
    return sum(xs)

@app.task("flow.boom", max_retries=0)
def boom(x: int) -> int:
    raise ValueError(f"no {x}")
'''


def flow_app(redis_url: str) -> tuple[App, dict[str, Any]]:
    """An App of this process on the page's queue, with the names FLOW_APP's worker runs
    (a producer needs the names only)."""
    app = App(queue=QUEUE, settings=Settings.from_env({}, redis_url=redis_url))

    @app.task("flow.gate")
    def gate(x: int) -> int:
        return x

    @app.task("flow.add")
    def add(x: int, y: int = 1) -> int:
        return x + y

    @app.task("flow.total")
    def total(xs: list[int]) -> int:
        return sum(xs)

    @app.task("flow.boom", max_retries=0)
    def boom(x: int) -> int:
        return x

    return app, {"gate": gate, "add": add, "total": total, "boom": boom}


def start_flow_worker(env: dict[str, str], tmp_path: Path) -> subprocess.Popen[bytes]:
    """A `taskq worker` process running FLOW_APP on the page's queue."""
    (tmp_path / "flow_app.py").write_text(FLOW_APP)
    path = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    worker_env = dict(env, LEASE_SECONDS="5", POLL_SECONDS="0.2", PYTHONPATH=path,
                      DASH_DIR=str(tmp_path))
    return spawn(taskq_command("worker", "--queue", QUEUE, "--app", "flow_app:app",
                               "--concurrency", "3"), worker_env, str(tmp_path / "worker.log"))


def flow_step(page: Page, task_id: str) -> Locator:
    return page.locator(f"[data-testid=flow-step][data-task-id='{task_id}']")


def test_a_workflow_is_listed_and_its_view_goes_live_from_waiting_to_completed(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path,
    redis_server: EmbeddedRedis
) -> None:
    queue.enqueue("job-0")  # the queue exists, so the page's feed opens live
    open_dashboard(page, server)
    expect(by_id(page, "flows-body")).to_have_text("No workflow in the recent events.")
    app, tasks = flow_app(redis_server.url)
    worker = start_flow_worker(env, tmp_path)
    try:
        chain(tasks["gate"].s(2), group(tasks["add"].s(), tasks["add"].s(y=10)),
              tasks["total"].s()).enqueue(flow_id="report-1")
        row = page.locator("[data-testid=flow-row][data-flow-id=report-1]")
        expect(row).to_have_attribute("data-state", "running")
        expect(row.get_by_test_id("flow-progress")).to_have_text("0 / 4")
        expect(row.get_by_test_id("flow-row-stage")).to_have_text("1 of 3")
        # The steps that wait are listed as such among the events.
        waiting = page.locator("[data-testid=event-row][data-type=enqueued]"
                               "[data-task-id='report-1.2.1']")
        expect(waiting.locator(".state")).to_have_text("waiting")
        expect(waiting.locator(".detail")).to_have_text(
            "waits for its stage · workflow report-1")

        row.get_by_test_id("flow-link").click()
        assert page.url.endswith("#flow=report-1")
        expect(by_id(page, "flow-view")).to_be_visible()
        expect(by_id(page, "flow-id")).to_have_text("report-1")
        stages = rows(page, "flow-stage")
        expect(stages).to_have_count(3)
        expect(stages.locator("h4")).to_have_text([
            re.compile("^Stage 1step$"), re.compile("^Stage 2group of 2 · on failure: fail$"),
            re.compile("^Stage 3step$")])
        expect(flow_step(page, "report-1.1.1")).to_have_attribute("data-state", "running")
        for later in ("report-1.2.1", "report-1.2.2", "report-1.3.1"):
            expect(flow_step(page, later)).to_have_attribute("data-state", "waiting")
        expect(flow_step(page, "report-1.2.2").get_by_test_id("flow-step-state")).to_have_text(
            "waiting")
        expect(flow_step(page, "report-1.3.1")).to_contain_text("flow.total")

        (tmp_path / "open").touch()
        expect(by_id(page, "flow-view-state")).to_have_text("completed")
        for step in ("report-1.1.1", "report-1.2.1", "report-1.2.2", "report-1.3.1"):
            expect(flow_step(page, step)).to_have_attribute("data-state", "completed")
        expect(by_id(page, "flow-view-progress")).to_have_text("4 / 4")
        expect(by_id(page, "flow-view-stage")).to_have_text("stage 3 of 3")
        expect(row).to_have_attribute("data-state", "completed")
        expect(row.get_by_test_id("flow-progress")).to_have_text("4 / 4")
        triggered = page.locator("[data-testid=event-row][data-type=triggered]")
        expect(triggered).to_have_count(3)
        expect(triggered.first.locator(".badge")).to_have_text("triggered")
        assert app.workflow("report-1").result(timeout=5) == (2 + 1) + (2 + 10)
    finally:
        stop_all([worker])
    a_step_and_its_workflow_link_each_other(page)


def test_a_workflow_step_whose_record_expired_counts_as_ended(
    page: Page, server: Server, queue: Broker, redis_server: EmbeddedRedis
) -> None:
    """A record expires only once its task has ended (its TTL): the bar and the list
    must not count such a step as still to run."""
    _, tasks = flow_app(redis_server.url)
    chain(tasks["gate"].s(2), tasks["add"].s()).enqueue(flow_id="aged-1")
    (first,) = queue.lease_many("w", 30, 1).tasks
    assert first.task_id == "aged-1.1.1" and queue.ack(first.task_id, first.token, "2")
    queue.client.delete(queue.keys.task(first.task_id))  # as its TTL would
    open_dashboard(page, server)
    row = page.locator("[data-testid=flow-row][data-flow-id=aged-1]")
    expect(row.get_by_test_id("flow-progress")).to_have_text("1 / 2")
    row.get_by_test_id("flow-link").click()
    expect(flow_step(page, "aged-1.1.1").get_by_test_id("flow-step-state")).to_have_text(
        "expired")
    expect(by_id(page, "flow-view-progress")).to_have_text("1 / 2")


def a_step_and_its_workflow_link_each_other(page: Page) -> None:
    """A step's box opens its task's view, which links back to its workflow."""
    flow_step(page, "report-1.2.2").click()
    expect(by_id(page, "task-view")).to_be_visible()
    expect(by_id(page, "flow-view")).to_be_hidden()
    expect(by_id(page, "task-id")).to_have_text("report-1.2.2")
    expect(by_id(page, "task-flow")).to_have_text("Step 2.2 of workflow report-1")
    expect(by_id(page, "task-result")).to_have_text("12")
    by_id(page, "task-flow-link").click()
    expect(by_id(page, "flow-view")).to_be_visible()
    expect(by_id(page, "task-view")).to_be_hidden()
    by_id(page, "flow-close").click()
    expect(by_id(page, "flow-view")).to_be_hidden()
    assert "#" not in page.url
    # A task of no workflow shows no link to one (the worker knew no `job-0`: it died).
    page.evaluate("window.location.hash = 'task=job-0'")
    expect(by_id(page, "task-state")).to_have_text("dead")
    expect(by_id(page, "task-flow")).to_be_hidden()


def test_the_view_of_a_workflow_of_thousands_of_steps_keeps_up_and_the_page_answers(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path,
    redis_server: EmbeddedRedis
) -> None:
    """Each step sends several events; a view redrawn for each froze the page for minutes."""
    queue.enqueue("job-0")
    _, tasks = flow_app(redis_server.url)
    add = tasks["add"]
    chain(add.s(0), *[add.s() for _ in range(1999)]).enqueue(flow_id="long-1")
    open_dashboard(page, server)
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url)
            if "/api/flows/" in request.url else None)
    page.evaluate("window.location.hash = 'flow=long-1'")
    # The first read of 2000 steps is one large reply: a loaded machine takes seconds.
    expect(by_id(page, "flow-view-progress")).to_have_text("0 / 2000", timeout=30_000)
    worker = start_flow_worker(env, tmp_path)
    try:
        expect(by_id(page, "flow-view-state")).to_have_text("completed", timeout=60_000)
        expect(by_id(page, "flow-view-progress")).to_have_text("2000 / 2000")
        assert page.evaluate("1 + 1") == 2
        expect(flow_step(page, "long-1.2000.1")).to_have_attribute("data-state", "completed")
    finally:
        stop_all([worker])


def test_a_workflows_view_reads_it_when_opened_and_when_it_may_end_not_at_each_step(
    page: Page, server: Server, queue: Broker, redis_server: EmbeddedRedis
) -> None:
    """A read of a workflow of thousands of steps holds a server thread ~50 ms: read at
    each step's end, it kept one busy for as long as the workflow ran."""
    _, tasks = flow_app(redis_server.url)
    add = tasks["add"]
    steps = 8
    chain(add.s(0), *[add.s() for _ in range(steps - 1)]).enqueue(flow_id="slow-1")
    page.goto(f"{server.url}/?queue={QUEUE}#flow=slow-1")
    expect(by_id(page, "flow-view-progress")).to_have_text(f"0 / {steps}")
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url)
            if "/api/flows/" in request.url else None)
    for done in range(1, steps + 1):
        task_id, token = lease_one(queue)
        assert queue.ack(task_id, token, json.dumps(done))
        expect(by_id(page, "flow-view-progress")).to_have_text(f"{done} / {steps}")
        page.wait_for_timeout(400)  # past the page's wait before a read (150 ms)
    expect(by_id(page, "flow-view-state")).to_have_text("completed")
    assert len(reads) == 1, reads  # at the last step's end


def test_a_link_to_a_workflow_that_is_not_there_is_not_listed_once_its_view_closes(
    page: Page, server: Server, queue: Broker
) -> None:
    queue.enqueue("t1")  # the queue exists; the workflow never did (a typo, or expired)
    page.goto(f"{server.url}/?queue={QUEUE}#flow=no-such-flow")
    expect(by_id(page, "flow-view")).to_be_visible()
    expect(page.locator("[data-testid=flow-row][data-flow-id=no-such-flow]")).to_have_count(1)
    by_id(page, "flow-close").click()
    expect(by_id(page, "flow-view")).to_be_hidden()
    # Listed no more, so no resync asks for it again.
    expect(rows(page, "flow-row")).to_have_count(0)


def test_a_step_that_dies_fails_its_workflow_and_the_later_steps_show_skipped(
    page: Page, server: Server, queue: Broker, env: dict[str, str], tmp_path: Path,
    redis_server: EmbeddedRedis
) -> None:
    app, tasks = flow_app(redis_server.url)
    add, boom = tasks["add"], tasks["boom"]
    # Seen in the events listed at load: the page lists it from them.
    chain(tasks["gate"].s(1), group(add.s(), boom.s(), add.s(y=5)), tasks["total"].s(),
          add.s()).enqueue(flow_id="etl-7")
    page.goto(f"{server.url}/?queue={QUEUE}#flow=etl-7")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    row = page.locator("[data-testid=flow-row][data-flow-id=etl-7]")
    expect(row).to_have_attribute("data-state", "running")
    expect(by_id(page, "flow-view")).to_be_visible()
    expect(flow_step(page, "etl-7.1.1")).to_have_attribute("data-state", "pending")
    expect(flow_step(page, "etl-7.4.1")).to_have_attribute("data-state", "waiting")

    (tmp_path / "open").touch()
    worker = start_flow_worker(env, tmp_path)
    try:
        expect(by_id(page, "flow-view-state")).to_have_text("failed")
        dead = flow_step(page, "etl-7.2.2")
        expect(dead).to_have_attribute("data-state", "dead")
        expect(dead).to_have_attribute("data-upstream", "true")
        expect(dead.get_by_test_id("upstream-badge")).to_have_text("failed the workflow")
        for member in ("etl-7.2.1", "etl-7.2.3"):
            expect(flow_step(page, member)).to_have_attribute("data-state", "completed")
            expect(flow_step(page, member)).to_have_attribute("data-upstream", "false")
        for later in ("etl-7.3.1", "etl-7.4.1"):
            expect(flow_step(page, later)).to_have_attribute("data-skipped", "true")
            expect(flow_step(page, later).get_by_test_id("flow-step-state")).to_have_text(
                "skipped")
        expect(by_id(page, "flow-error")).to_have_text(
            "1 of 3 steps of stage 2 did not complete: etl-7.2.2 (dead: ValueError: no 1)")
        expect(by_id(page, "flow-view-progress")).to_have_text("6 / 6")
        expect(row).to_have_attribute("data-state", "failed")
        skipped = page.locator("[data-testid=event-row][data-type=cancelled]"
                               "[data-task-id='etl-7.4.1']")
        expect(skipped.locator(".detail")).to_have_text("skipped: etl-7.2.2 did not complete")
        shot = page.screenshot(path=str(tmp_path / "dashboard-workflow.png"))
        if os.environ.get("TASKQ_SCREENSHOT") == "1":
            (DOCS / "dashboard-workflow.png").write_bytes(shot)
    finally:
        stop_all([worker])
    with pytest.raises(UpstreamFailed):
        app.workflow("etl-7").result(timeout=5)

    flow_step(page, "etl-7.3.1").click()
    expect(by_id(page, "task-state")).to_have_text("cancelled")
    expect(by_id(page, "task-flow")).to_have_text(
        "Step 3.1 of workflow etl-7 · skipped: etl-7.2.2 did not complete")
    # The History panel lists the skipped steps as the ended tasks they are.
    history = page.locator("[data-testid=history-row][data-task-id='etl-7.4.1']")
    expect(history.get_by_test_id("history-state")).to_have_text("cancelled")


def test_a_workflow_cancelled_while_each_of_its_steps_runs_shows_cancelled_at_once(
    page: Page, server: Server, queue: Broker, redis_server: EmbeddedRedis
) -> None:
    """Its cancel ends no step yet (each is told at its next heartbeat): the events are
    cancel requests, and the row must not wait for a step's end or the 30 s resync."""
    app, tasks = flow_app(redis_server.url)
    group(tasks["add"].s(1), tasks["add"].s(2)).enqueue(flow_id="bill-3")  # no step waits
    assert len(queue.lease_many("w-held", 60, 2).tasks) == 2  # both steps running
    page.goto(f"{server.url}/?queue={QUEUE}")
    expect(by_id(page, "conn-state")).to_have_attribute("data-state", "live")
    row = page.locator("[data-testid=flow-row][data-flow-id=bill-3]")
    expect(row).to_have_attribute("data-state", "running")
    assert app.workflow("bill-3").cancel().told == 2
    expect(row).to_have_attribute("data-state", "cancelled", timeout=10_000)


def test_a_burst_of_workflows_reads_only_the_listed_ones(
    page: Page, server: Server, queue: Broker, redis_server: EmbeddedRedis
) -> None:
    queue.enqueue("job-0")
    open_dashboard(page, server)
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url)
            if "/api/flows/" in request.url else None)
    app, tasks = flow_app(redis_server.url)
    burst = 200
    # The page's scripts are held while the workflows start, so their events reach it
    # as one burst however slowly a loaded machine enqueues them.
    # A pause takes hold at the page's next statement, so a timer gives it one at once
    # rather than whenever the first event happens to land.
    page.evaluate("window.setInterval(() => {}, 5)")
    devtools = page.context.new_cdp_session(page)
    paused: list[object] = []

    def on_paused(event: object) -> None:  # Playwright tags its listeners: no builtins
        paused.append(event)

    devtools.on("Debugger.paused", on_paused)
    devtools.send("Debugger.enable")
    devtools.send("Debugger.pause")
    deadline = time.monotonic() + 10
    while not paused and time.monotonic() < deadline:
        devtools.send("Runtime.getIsolateId")  # a round trip lets the event be delivered
    assert paused, "the page never paused"
    for n in range(burst):
        chain(tasks["add"].s(n)).enqueue(flow_id=f"burst-{n:03}")
    devtools.send("Debugger.resume")
    devtools.detach()
    listed = rows(page, "flow-row")
    expect(listed).to_have_count(MAX_LISTED_FLOWS)
    expect(listed.first).to_have_attribute("data-flow-id", f"burst-{burst - 1}")
    for row in listed.all():
        expect(row).to_have_attribute("data-state", "running")
    # Each burst of events that names new workflows reads the listed ones it brought.
    assert MAX_LISTED_FLOWS <= len(reads) <= 3 * MAX_LISTED_FLOWS, len(reads)
    app.broker.client.close()
