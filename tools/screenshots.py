#!/usr/bin/env python3
"""PNG screenshots of the docs site, the playground and the live dashboard, for README.md.

Owns: producing docs/screenshots/*.png (or --out DIR). Imports: the standard
library, nobroker (to fill a sample queue) and tests.browser (the headless
Chromium driver the page tests use).

    python make.py screenshots            # or: python tools/screenshots.py --out /tmp/shots

The docs site is shot in light and dark mode; the playground after a recipe
has torn a record (so the hex view shows the torn bytes); the dashboard over a
sample folder of two queues with jobs in every state, schedules, limits and a
paused kind, served by ``nobroker serve`` on a free loopback port, with a
failed job's page open (its attempts and why it is dead), the whole page, a worker
working ``ping`` jobs meanwhile so the throughput chart has a line and the
workers' panel a worker (it waits about 20 s for two samples), once at the
desktop viewport and once at a phone's width (dashboard-phone.png). Without a dashboard in this copy, that shot is skipped with a
message. The server started here is always stopped.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
for path in (ROOT / "src", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.browser import Browser, BrowserError, BrowserUnavailable, file_url  # noqa: E402

DEFAULT_OUT = ROOT / "docs" / "screenshots"
#: Viewport of every shot: wide enough for the two-column layouts.
VIEWPORT = (1280, 900)
#: The phone shot of the dashboard: an iPhone's width in CSS pixels.
PHONE_VIEWPORT = (375, 812)
#: Seconds to wait for the dashboard server to answer, and for its first live refresh.
SERVER_START_TIMEOUT = 20.0
DASHBOARD_SETTLE_TIMEOUT = 10.0
#: Seconds to wait for the chart's first line (two samples of the counters, 10 s apart), and the jobs worked meanwhile.
CHART_TIMEOUT = 60.0
BACKGROUND_JOBS = 3000
#: The playground recipe shown, and how many of its steps run (3 = just after the torn write).
PLAYGROUND_RECIPE = "crash-and-recover"
PLAYGROUND_STEPS = 3


def say(text: str) -> None:
    print(f"screenshots: {text}", flush=True)


def set_viewport(browser: Browser, size: tuple[int, int], *, mobile: bool) -> None:
    browser.send("Emulation.setDeviceMetricsOverride", {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": mobile})


def set_color_scheme(browser: Browser, scheme: str) -> None:
    browser.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})


def shoot_docs(browser: Browser, out: pathlib.Path) -> list[pathlib.Path]:
    shots = []
    for scheme in ("light", "dark"):
        set_color_scheme(browser, scheme)
        browser.open(file_url(ROOT / "web" / "index.html"))
        name = "docs.png" if scheme == "light" else "docs-dark.png"
        shots.append(pathlib.Path(browser.screenshot(out / name)))
    set_color_scheme(browser, "light")
    browser.open(file_url(ROOT / "web" / "index.html"))
    browser.evaluate("document.documentElement.style.scrollBehavior = 'auto'; document.getElementById('design').scrollIntoView(); true")
    shots.append(pathlib.Path(browser.screenshot(out / "docs-design.png")))
    return shots


def shoot_playground(browser: Browser, out: pathlib.Path) -> list[pathlib.Path]:
    set_color_scheme(browser, "light")
    browser.open(file_url(ROOT / "web" / "playground.html"))
    browser.evaluate(f"playground.runRecipe({PLAYGROUND_RECIPE!r}, {PLAYGROUND_STEPS}); true")
    shots = [pathlib.Path(browser.screenshot(out / "playground.png"))]
    # The disk itself: the log table and the hex view with the torn bytes marked.
    browser.evaluate("document.getElementById('log').closest('.two').scrollIntoView(); true")
    shots.append(pathlib.Path(browser.screenshot(out / "playground-disk.png")))
    return shots


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The job whose page the dashboard shot shows: one that failed, with its traceback.
SHOWN_JOB = "welcome-barbara"
SAMPLE_TRACEBACK = """Traceback (most recent call last):
  File "app/handlers.py", line 41, in send_welcome
    smtp.sendmail(FROM, job.payload["send_welcome_to"], body)
  File "/usr/lib/python3.11/smtplib.py", line 901, in sendmail
    raise SMTPRecipientsRefused(senderrs)
smtplib.SMTPRecipientsRefused: {'barbara@example.com': (550, b'no such user')}"""


def fill_sample_queue(directory: str) -> str:
    """Two queues with something in every state, so the dashboard has a story to show; the address to open."""
    from nobroker import Queue

    with Queue(directory, max_attempts=2) as q:
        for i, who in enumerate(["ada", "grace", "alan", "barbara", "edsger", "donald"]):
            q.enqueue({"send_welcome_to": f"{who}@example.com"}, job_id=f"welcome-{who}", priority=-i, kind="email")
        q.enqueue({"resize": "holiday.jpg", "width": 1200}, job_id="thumb-holiday", priority=-9, kind="thumbnail")
        q.enqueue({"report": "q3"}, job_id="report-q3", delay=3600, kind="report")
        for job in q.lease(3):  # ada, grace, alan
            q.ack(job, result={"sent": True})
        broken = q.lease_one()  # barbara: fails, is retried at once, fails for good (two attempts on her page)
        if broken is not None:
            q.nack(broken, error="SMTPServerDisconnected: Connection unexpectedly closed", delay=0)
            again = q.lease_one()
            if again is not None:
                q.nack(again, error="SMTPRecipientsRefused: barbara@example.com: 550 no such user",
                       traceback=SAMPLE_TRACEBACK, permanent=True)
        leased = q.lease_one(visibility_timeout=600)  # edsger
        if leased is not None:
            q.set_stage(leased, "rendering")
    with Queue(directory) as q:  # the control panels: schedules, limits, a paused kind (the banner)
        q.schedule("nightly-report", {"report": "daily"}, cron="0 3 * * *", tz="Europe/Berlin", kind="report", catch_up="last")
        q.schedule("cache-warmup", {"warm": "home"}, every=3600, kind="thumbnail")
        q.set_limit("email", concurrency=2, rate=30, per=60)
        q.set_limit("thumbnail", concurrency=4)
        q.pause("thumbnail")
    with Queue(directory, "reports") as reports:
        for month in ("2026-09", "2026-10", "2026-11"):
            reports.enqueue({"monthly_report": month}, kind="report")
    return f"?queue=default&state=all&limit=20&job={SHOWN_JOB}"


def shoot_dashboard(browser: Browser, out: pathlib.Path) -> list[pathlib.Path]:
    if not (ROOT / "src" / "nobroker" / "dashboard").is_dir():
        say("skipping the dashboard: this copy of nobroker has no dashboard (src/nobroker/dashboard/)")
        return []
    directory = tempfile.mkdtemp(prefix="nobroker-shots-")
    server: subprocess.Popen[bytes] | None = None
    try:
        address = fill_sample_queue(directory)
        port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.pop("NOBROKER_TOKEN", None)  # a token in the caller's environment would lock the page
        server = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", directory, "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/"
        if not wait_for_http(url, server):
            err = server.stderr.read().decode(errors="replace") if server.poll() is not None and server.stderr else ""
            say(f"skipping the dashboard: `nobroker serve` did not answer within {SERVER_START_TIMEOUT:.0f}s {err.strip()}")
            return []
        busy = BackgroundWork(directory)
        busy.start()
        try:
            set_color_scheme(browser, "light")
            browser.open(url + address)
            wait_for_dashboard(browser)
            wait_for_chart(browser)
            wait_for_job_page(browser)
            shots = [pathlib.Path(browser.screenshot(out / "dashboard.png", full_page=True))]
            set_viewport(browser, PHONE_VIEWPORT, mobile=True)
            try:
                browser.open(url + "?queue=default&state=all")
                wait_for_dashboard(browser)
                wait_for_chart(browser)
                shots.append(pathlib.Path(browser.screenshot(out / "dashboard-phone.png")))
            finally:
                set_viewport(browser, VIEWPORT, mobile=False)
                # Leave the page before its server goes, so its next refresh is not a refused connection.
                browser.open("about:blank")
        finally:
            busy.stop()
        return shots
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=5)
            if server.stderr:
                server.stderr.close()
        shutil.rmtree(directory, ignore_errors=True)


class BackgroundWork:
    """A Worker on the sample queue's ``ping`` jobs while the shot is taken: the chart has a line, the workers' panel a worker."""

    def __init__(self, directory: str) -> None:
        from nobroker import Queue, Worker

        self.queue = Queue(directory, fsync=False)
        self.queue.enqueue_many([{"ping": n} for n in range(BACKGROUND_JOBS)], kind="ping")

        def handle(job: object) -> None:
            time.sleep(0.05)
            if getattr(job, "payload", {}).get("ping", 0) % 7 == 0:  # type: ignore[union-attr]
                raise RuntimeError("every seventh ping fails (a sample failure for the chart)")

        self.worker = Worker(self.queue, handle, concurrency=4, kinds=["ping"], name="shots-worker", handle_signals=False)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(timeout=30)
        self.queue.close()


def wait_for_chart(browser: Browser) -> None:
    """Until the chart has a line (the server samples every 10 s: a rate needs two samples)."""
    deadline = time.monotonic() + CHART_TIMEOUT
    while time.monotonic() < deadline:
        if browser.evaluate("document.querySelector('#chart path') !== null && document.querySelectorAll('tr.worker').length > 0"):
            time.sleep(0.3)
            return
        time.sleep(0.5)
    say("the chart had no line in time; taking the shot anyway")


def wait_for_job_page(browser: Browser) -> None:
    """Until the job's page shows why it is where it is and its attempts (read after the job itself)."""
    deadline = time.monotonic() + DASHBOARD_SETTLE_TIMEOUT
    probe = "document.querySelector('#detail-explain li') !== null && document.querySelector('#schedules tr.schedule') !== null"
    while time.monotonic() < deadline:
        if browser.evaluate(probe):
            time.sleep(0.3)
            return
        time.sleep(0.1)
    say("the job's reasons did not appear in time; taking the shot anyway")


def wait_for_http(url: str, server: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def wait_for_dashboard(browser: Browser) -> None:
    """Until the live counts, the queues and the jobs have arrived (the page fills them in after loading)."""
    deadline = time.monotonic() + DASHBOARD_SETTLE_TIMEOUT
    probe = ("(() => { const e = document.getElementById('count-total'); return !!e && /\\d/.test(e.textContent)"
             " && document.querySelectorAll('#queues button.queue').length > 0 && document.querySelectorAll('#jobs tr.job').length > 0"
             " && (!new URLSearchParams(location.search).get('job') || !document.getElementById('detail').hidden); })()")
    while time.monotonic() < deadline:
        if browser.evaluate(probe):
            time.sleep(0.3)  # let the jobs table that follows the counts paint
            return
        time.sleep(0.1)
    say("the dashboard's counts did not appear in time; taking the shot anyway")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PNG screenshots of the docs site, the playground and the dashboard.")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help=f"folder for the PNGs (default {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--no-dashboard", action="store_true", help="skip the dashboard shot")
    args = parser.parse_args(argv)
    out: pathlib.Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    try:
        browser = Browser.start(window_size=VIEWPORT)
    except BrowserUnavailable as exc:
        say(f"cannot take screenshots: {exc}")
        return 1
    shots: list[pathlib.Path] = []
    try:
        shots += shoot_docs(browser, out)
        shots += shoot_playground(browser, out)
        if not args.no_dashboard:
            shots += shoot_dashboard(browser, out)
        if browser.errors:
            say("the pages reported errors: " + "; ".join(browser.errors))
            return 1
    except BrowserError as exc:
        say(f"the browser failed: {exc}")
        return 1
    finally:
        browser.close()
    for shot in shots:
        say(f"wrote {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
