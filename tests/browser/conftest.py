"""The browser suite: a real JupyterLab on 127.0.0.1, driven headless by Debian's
chromium through Python playwright, the way a person uses escouade_nb.

ONE JupyterLab server and ONE chromium serve the whole run (session fixtures ``lab`` and
``browser``); each test gets a fresh browser context and page (``lab_page``: the app loaded
anew, no tab, cookie, permission or script state of an earlier test; made while the test before
it ran, so that its load costs the run little: ``Pages``) and its own folder
under the server's throw-away root, where its notebook is generated (``nb``; the kernel runs
in that folder). Notebook 7's pages (``/notebooks/PATH``) are served by the same server;
a test that needs a kernel environment sets it in its kernel, so no test needs a server
of its own. After each test its context is closed (every tab), every session and kernel of
the server is shut down, whoever started it, and nothing the test started (kernels, agents)
may be left; a test then starts on a server with no kernel (checked).

The browser tests run after every other test of the same pytest run (collection puts them
last): between its calls playwright's sync API marks its event loop as running in the main
thread, so ``asyncio.run`` in a test after the first browser test would fail while chromium
is up. They stay one serial run (with or without ``-n 0``): one server, one chromium.

Every process this suite starts carries a marker in its environment (the server,
and through it the kernels and the agents; chromium; playwright's driver), so the
teardowns can check in ``/proc`` that nothing is left behind — after each test
(kernels, agents) and at the end (server, chromium, driver), also when a test fails.

Skipped, with a one-line reason, when ``/usr/bin/chromium`` (override:
``ESCOUADE_CHROMIUM``), Python ``playwright`` or ``jupyterlab`` is missing:
``bash scripts/ci-browser.sh VENV`` installs them. Never ``playwright install``.
Screenshots go to ``$ESCOUADE_BROWSER_ARTIFACTS`` (default: a folder in the temp dir,
printed at the end of the run), a failed test's full page as ``FAILED-<test>.png``; with
``ESCOUADE_BROWSER_UPDATE_DOCS=1`` the README's pictures are also copied to ``docs/``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from browser_waits import until

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("ESCOUADE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("ESCOUADE_BROWSER_ARTIFACTS")
                 or Path(tempfile.gettempdir()) / "escouade-browser-artifacts")
# Flags that keep chromium off the network (nothing but 127.0.0.1 resolves) and quiet.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-default-apps", "--disable-domain-reliability", "--no-pings", "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
# The pictures shown in the README: with ESCOUADE_BROWSER_UPDATE_DOCS=1 the suite copies them to docs/.
DOCS = HERE.parent.parent / "docs"
DOCS_SHOTS = ("agent-view", "agent-view-dark", "permission-card", "plan-approval", "journal", "kernel-tools",
              "orchestration", "reviewed-cell")
DOCS_MAX_BYTES = 300_000
MARK = "ESCOUADE_BROWSER_SUITE"  # environment marker of every process the suite starts
RUN_ID = uuid.uuid4().hex[:12]
TOKEN = "escouade-" + uuid.uuid4().hex


def missing() -> str | None:
    """Why the suite cannot run here, in one line (None: it can)."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} not found (bash scripts/ci-browser.sh VENV installs chromium and playwright)"
    for module, pkg in (("playwright", "playwright"), ("jupyterlab", "jupyterlab")):
        if importlib.util.find_spec(module) is None:
            return f"Python {pkg} not installed in {sys.prefix} (bash scripts/ci-browser.sh VENV installs it)"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives a real JupyterLab in headless chromium (tests/browser)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the browser tests (skipped with the reason when the suite cannot run here) and
    put them after every other test, in their order (see the module's docstring)."""
    reason = missing()
    ours = [item for item in items if HERE in Path(str(item.path)).resolve().parents]
    for item in ours:
        item.add_marker(pytest.mark.browser)
        if item.get_closest_marker("timeout") is None:  # the first pays for the server's start (90 s a try), a
            item.add_marker(pytest.mark.timeout(600))   # released agent's turn may take 180 s: 600 s, not 300
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"browser suite: {reason}"))
    if ours:
        mine = set(map(id, ours))
        items[:] = [item for item in items if id(item) not in mine] + ours


# --------------------------------------------------------------------------- processes

def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def marked(value: str) -> dict[int, str]:
    """Live processes whose environment carries ``MARK=value``: pid -> command line."""
    needle = f"{MARK}={value}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if _alive(int(entry.name)):
            found[int(entry.name)] = cmd[:160]
    return found


def reap(value: str, keep: set[int] = frozenset(), timeout: float = 15.0) -> dict[int, str]:
    """Wait up to ``timeout`` for the marked processes (but ``keep``) to end; kill the
    ones still there and return them (empty: nothing was left behind)."""
    deadline = time.monotonic() + timeout
    left = {p: c for p, c in marked(value).items() if p not in keep}
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = {p: c for p, c in marked(value).items() if p not in keep}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


# --------------------------------------------------------------------------- JupyterLab

def _term_when_parent_dies() -> None:
    """In the server's child process: SIGTERM it if pytest dies without its teardown
    (killed), so it still shuts its kernels down. Linux only; elsewhere a no-op."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Lab:
    """A JupyterLab server on 127.0.0.1 with a token and throw-away folders."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "root"
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = base / "jupyterlab.log"
        self.mark = f"lab-{RUN_ID}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def _prepare(self) -> dict[str, str]:
        dirs = {k: self.base / k for k in ("root", "home", "config", "data", "runtime", "settings", "workspaces")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        (dirs["config"] / "jupyter_server_config.py").write_text(
            "c.LabApp.news_url = None\n"
            "c.LabApp.check_for_updates_class = 'jupyterlab.NeverCheckForUpdate'\n"
            "c.ServerApp.terminals_enabled = False\n"
            # no build check at each page load (it runs node and takes seconds on a small machine)
            "c.ServerApp.tornado_settings = {'page_config_data': {'buildCheck': False, 'buildAvailable': False}}\n"
            "c.LanguageServerManager.autodetect = False\n"
            # window.jupyterapp: the suite opens and closes notebooks with the app's own commands
            "c.LabApp.expose_app_in_browser = True\n"
            # the same in Notebook 7's pages (/notebooks/PATH)
            "c.JupyterNotebookApp.expose_app_in_browser = True\n")
        settings = {
            # no "get notified about Jupyter news?" toast over the screenshots, no requests out
            ("@jupyterlab", "apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
            # every cell attached to the DOM, so locators see them all
            ("@jupyterlab", "notebook-extension", "tracker"): {"windowingMode": "none"},
        }
        for (scope, ext, plugin), value in settings.items():
            folder = dirs["settings"] / scope / ext
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "ESCOUADE_NB_", "IPYTHON")) and k != "PYTHONSTARTUP"}
        env.update({
            "HOME": str(dirs["home"]), "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]), "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
            "IPYTHONDIR": str(dirs["home"] / ".ipython"), "XDG_CONFIG_HOME": str(dirs["home"] / ".config"),
            "XDG_CACHE_HOME": str(dirs["home"] / ".cache"), "JUPYTER_PREFER_ENV_PATH": "1",
            "PYTHONUNBUFFERED": "1", MARK: self.mark,
        })
        return env

    def start(self, timeout: float = 90) -> None:
        env = self._prepare()
        for _attempt in range(3):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={self.port}",
                   "--ServerApp.port_retries=0", "--no-browser", f"--IdentityProvider.token={TOKEN}",
                   f"--ServerApp.root_dir={self.root}"]
            if os.geteuid() == 0:
                cmd.append("--allow-root")
            log = open(self.log_path, "ab")  # kept open for the server's life
            self.proc = subprocess.Popen(cmd, env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_term_when_parent_dies)
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/api/status", timeout=2)
                    return
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(0.2)
            if self.proc.poll() is None:
                break  # up but not answering: give up below
        self.stop()
        raise RuntimeError(f"JupyterLab did not start; its log:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL the group if needed."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def sessions_for(self, path: str) -> list[dict[str, Any]]:
        return [s for s in self.api("GET", "/api/sessions") if s.get("path") == path]

    def processes(self) -> dict[int, str]:
        """The live processes the server started (its kernels, their agents), itself too:
        pid -> command line."""
        return marked(self.mark)

    def shutdown_sessions(self, path: str) -> None:
        """Shut down the sessions (and so the kernels) of the notebook at ``path``."""
        for s in self.sessions_for(path):
            try:
                self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
            except urllib.error.HTTPError:  # gone meanwhile
                pass

    def shutdown_all(self) -> None:
        """Shut down every session and every kernel of the server, whoever started them;
        raise ``AssertionError`` if the server still lists one after 30 s."""
        for path in {s.get("path") for s in self.api("GET", "/api/sessions")}:
            self.shutdown_sessions(path)
        for k in self.api("GET", "/api/kernels"):  # kernels without a session (started by the API)
            try:
                self.api("DELETE", f"/api/kernels/{k['id']}", timeout=30)
            except urllib.error.HTTPError:
                pass
        until(lambda: not self.api("GET", "/api/kernels") and not self.api("GET", "/api/sessions"),
              "the server lists no kernel and no session")

    def alive_or_fail(self) -> None:
        """Fail the test (with the log's tail) when the server is no longer running."""
        if self.proc is None or self.proc.poll() is not None:
            pytest.fail(f"the suite's JupyterLab has exited; its log:\n{self.log_tail()}")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory):
    for old in ARTIFACTS.glob("FAILED-*.png"):  # from an earlier run
        old.unlink(missing_ok=True)
    base = tmp_path_factory.mktemp("jlab")
    server = Lab(base)
    started = time.monotonic()
    try:
        server.start()
        print(f"\nJupyterLab up on {server.url} in {time.monotonic() - started:.1f} s", file=sys.stderr)
        yield server
    finally:
        server.stop()
        left = reap(server.mark, timeout=15)
        if left:
            pytest.fail(f"processes left behind by JupyterLab (killed now): {left}")


# --------------------------------------------------------------------------- chromium

@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    mark = f"chromium-{RUN_ID}"
    old = os.environ.get(MARK)
    os.environ[MARK] = mark  # inherited by playwright's driver (and through it, chromium)
    try:
        pw = sync_playwright().start()
    finally:
        if old is None:
            os.environ.pop(MARK, None)
        else:
            os.environ[MARK] = old
    chromium = None
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOOGLE_")}
        env[MARK] = mark
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env)
        yield chromium
    finally:
        try:
            if chromium is not None:
                chromium.close()
        finally:
            pw.stop()
            left = reap(mark, timeout=10)
            if left:
                pytest.fail(f"chromium/playwright processes left behind (killed now): {left}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On a failure: a screenshot of the page and its console errors, in the report."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    nb = getattr(item, "funcargs", {}).get("nb")
    if rep.when == "call" and rep.failed and isinstance(nb, Notebook):
        shot = nb.failure_shot(item.name)
        rep.sections.append(("browser", f"screenshot: {shot}\nconsole errors:\n" +
                             ("\n".join(nb.errors) or "(none)") + f"\nJupyterLab log tail:\n{nb.lab.log_tail(1500)}"))


_written: list[Path] = []  # screenshots of this run


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _written:
        terminalreporter.write_line(f"browser suite: {len(_written)} screenshots in {ARTIFACTS}")
    if LabPage.waits:
        waits = sorted(LabPage.waits)
        terminalreporter.write_line(f"browser suite: {len(waits)} tests waited for their JupyterLab page: median "
                                    f"{waits[len(waits) // 2]:.1f} s, longest {waits[-1]:.1f} s, "
                                    f"{sum(waits):.0f} s in all")


# --------------------------------------------------------------------------- a notebook in the page

# the notebook at path is the app's current widget; else it is opened (or brought to the front): false
NOTEBOOK_IN_FRONT = """p => { const app = window.jupyterapp, w = app.shell.currentWidget;
  if (w && w.context && w.context.path === p) return true;
  app.commands.execute('docmanager:open', {path: p, factory: 'Notebook'}); return false; }"""


class LabPage:
    """One test's JupyterLab page, in a browser context of its own (no cookie, cache,
    permission or tab of another test). Console errors are collected. Made, it starts
    loading; :meth:`ready` waits for the app (see :class:`Pages`)."""

    waits: list[float] = []  # seconds the tests waited for their page (the run's figures, printed at the end)
    URL = "{}/lab/workspaces/escouade-browser?reset&token={}"  # reset: no tab of an earlier page is restored

    def __init__(self, lab: Lab, browser) -> None:
        self.lab = lab
        self._before: set[int] = set()
        self._finished = False
        self.context = browser.new_context(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
        self.context.set_default_timeout(30_000)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        try:
            self._go(60)
        except BaseException:
            self.context.close()
            raise

    def _go(self, timeout: float) -> None:
        # what is waited for is the app (ready), not the page's load event, which goto would
        # wait for within the context's default 30 s (the bundles take longer on a loaded machine)
        self.page.goto(self.URL.format(self.lab.url, TOKEN), wait_until="commit", timeout=timeout * 1000)

    def ready(self, timeout: float = 60) -> None:
        """Wait (``timeout`` seconds at most) until the app is up and restored, then give the
        notebook the width; raises playwright's ``TimeoutError`` past it."""
        deadline = time.monotonic() + timeout
        left = lambda: max(1.0, deadline - time.monotonic()) * 1000  # noqa: E731 - ms for playwright
        self.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                                    "'docmanager:open')", timeout=left())
        self.page.evaluate("() => window.jupyterapp.restored")
        self.page.locator("#jp-main-dock-panel").wait_for(timeout=left())
        self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # the notebook gets the width

    def load(self, timeout: float = 60) -> None:
        """Load the app again (a reload, as a person's): seconds; raises playwright's
        ``TimeoutError`` past ``timeout``."""
        started = time.monotonic()
        self._go(timeout)
        self.ready(max(1.0, timeout - (time.monotonic() - started)))

    def second_tab(self, path: str, workspace: str, timeout: float = 180):
        """The notebook at ``path`` opened in a new page (tab) of this context, a JupyterLab of
        workspace ``workspace`` (reset), once it is that page's current widget (JupyterLab may
        put its launcher there after the notebook opened: the notebook is brought back to the
        front). Returns the playwright page; raises past ``timeout`` seconds (a second app on a
        loaded machine is slow)."""
        deadline = time.monotonic() + timeout
        left = lambda: max(1.0, deadline - time.monotonic()) * 1000  # noqa: E731 - ms for playwright
        page = self.context.new_page()
        page.goto(f"{self.lab.url}/lab/workspaces/{workspace}?reset", wait_until="commit", timeout=left())
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                               "'docmanager:open')", timeout=left())
        page.evaluate("() => window.jupyterapp.restored")
        until(lambda: page.evaluate(NOTEBOOK_IN_FRONT, path), f"{path} in front in a second tab",
              max(1.0, deadline - time.monotonic()))
        return page

    def adopt(self) -> LabPage:
        """This page is now a test's: what runs on the server now is not the test's."""
        self._before = set(marked(self.lab.mark))
        return self

    def close_documents(self) -> None:
        """Close every tab of the main area without asking (the notebooks were edited)."""
        self.page.evaluate("""() => {
          for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
            if (w.context && w.context.model) { w.context.model.dirty = false; }
            w.dispose();
          }
        }""")

    def close(self) -> None:
        """Close the context: every page of it (tabs of the test included)."""
        self.context.close()

    def finish(self) -> dict[int, str]:
        """End the test on the server's side too: close the context, shut down every
        session and kernel, wait (20 s at most) for what the test started to end. Returns
        the processes that had to be killed (pid -> command line); empty the second time."""
        if self._finished:
            return {}
        self._finished = True
        try:
            self.close()
        finally:
            try:
                self.lab.shutdown_all()
            finally:
                left = reap(self.lab.mark, keep=self._before | {self.lab.proc.pid}, timeout=20)
        return left


class Pages:
    """The tests' pages: each test takes a page that was made (and so started loading) while
    the test before it ran — a JupyterLab page takes seconds of CPU to load, and a test mostly
    waits on kernels and agents — and leaves the next one loading. Never a page used before."""

    def __init__(self, lab: Lab, browser) -> None:
        self.lab, self.browser = lab, browser
        self.spare: LabPage | None = None

    def take(self) -> LabPage:
        """A page with the app up (raises playwright's ``TimeoutError`` if none comes up in 60 s)."""
        started = time.monotonic()
        page, self.spare = self.spare, None
        try:
            if page is None:
                page = LabPage(self.lab, self.browser)
            page.ready()
        except Exception:  # the spare's load failed (its page crashed, the server was slow): a new one
            if page is not None:
                page.close()
            page = LabPage(self.lab, self.browser)
            try:
                page.ready()
            except BaseException:
                page.close()
                raise
        LabPage.waits.append(time.monotonic() - started)
        self.spare = LabPage(self.lab, self.browser)  # loads while this test runs
        return page.adopt()

    def close(self) -> None:
        if self.spare is not None:
            self.spare.close()
            self.spare = None


@pytest.fixture(scope="session")
def pages(lab: Lab, browser):
    """The run's :class:`Pages` (the spare closed at the end)."""
    made = Pages(lab, browser)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def lab_page(request: pytest.FixtureRequest, lab: Lab, pages: Pages):
    """This test's page (a fresh context) on a server with no kernel; after the test as
    ``LabPage.finish``: fails the test if it left a process behind."""
    lab.alive_or_fail()
    assert not lab.api("GET", "/api/kernels"), "a kernel of an earlier test is still running"
    page = pages.take()
    try:
        yield page
    finally:
        left = page.finish()
        if left:
            pytest.fail(f"{request.node.name} left processes behind (killed now): {left}")


class Notebook:
    """One test's notebook: generated into the test's own folder of the server's root
    (``path`` is relative to the root: ``NAME/NAME.ipynb``), opened in the test's page, run
    cell by cell like a person (click the cell, Shift+Enter)."""

    def __init__(self, lab_page: LabPage, name: str) -> None:
        self.lab = lab_page.lab
        self.lab_page = lab_page
        self.page = lab_page.page
        self.name = name
        self.folder = self.lab.root / name  # this test's; the kernel runs here
        self.folder.mkdir()
        self.path = f"{name}/{name}.ipynb"
        self._first_error = len(lab_page.errors)
        # the agent's --cwd: short, as it is shown in the view's header (and the pictures)
        self.work = Path(tempfile.mkdtemp(prefix="escouade-demo-"))

    @property
    def errors(self) -> list[str]:
        """The page's console errors since this notebook was made."""
        return self.lab_page.errors[self._first_error:]

    # -- set up ------------------------------------------------------------------------------
    def open(self, cells: list[str], timeout: float = 60) -> None:
        self.write(cells)
        self.page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                           self.path)
        self.cell(len(cells) - 1).wait_for(timeout=timeout * 1000)
        self.wait_kernel_idle(timeout)

    def write(self, cells: list[str]) -> None:
        """Write this test's notebook (code cells) into the server's root, opened nowhere."""
        import nbformat

        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
        nbformat.write(nb, str(self.lab.root / self.path))

    def in_notebook_7(self, timeout: float = 60) -> Notebook:
        """This notebook (already written) opened in Notebook 7 (``/notebooks/PATH``) in a new
        page of the session's browser context (its login cookie): a copy of this object
        driving that page (``.page``; close it with ``.page.close()``), once the extension's
        panel is there and the kernel idle. Fails when the server has no Notebook 7."""
        import copy

        page = self.lab_page.context.new_page()
        page.on("console", lambda m: m.type == "error" and self.lab_page.errors.append(f"console (nb7): {m.text}"))
        response = page.goto(f"{self.lab.url}/notebooks/{self.path}")
        assert response is not None and response.status != 404, "no Notebook 7 here (pip install notebook)"
        seven = copy.copy(self)
        seven.page = page
        seven.cell(0).wait_for(timeout=timeout * 1000)
        page.locator(".jp-NotebookPanel[data-escouade-client]").wait_for(timeout=timeout * 1000)
        until(self._kernel_idle, f"the kernel of {self.path} idle in Notebook 7", timeout)
        return seven

    def _kernel_idle(self) -> bool:
        sessions = self.lab.sessions_for(self.path)
        return bool(sessions) and sessions[0]["kernel"]["execution_state"] == "idle"

    def wait_kernel_idle(self, timeout: float = 60) -> None:
        """The server says the kernel is idle and so does the notebook's toolbar."""
        deadline = time.monotonic() + timeout
        until(self._kernel_idle, f"the kernel of {self.path} idle", timeout)
        self.panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
            timeout=max(1.0, deadline - time.monotonic()) * 1000)

    # -- cells ---------------------------------------------------------------------------------
    @property
    def panel(self):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")

    def cell(self, i: int):
        return self.panel.locator(".jp-Notebook .jp-Cell").nth(i)

    def output(self, i: int):
        return self.cell(i).locator(".jp-OutputArea")

    def run_cell(self, i: int, timeout: float = 60) -> None:
        """Click into cell ``i`` and press Shift+Enter; wait until its prompt shows a number."""
        cell = self.cell(i)
        cell.locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Shift+Enter")
        prompt = cell.locator(".jp-InputArea-prompt")

        def counted() -> bool:
            text = prompt.inner_text().strip()
            return text.startswith("[") and text[1:-2].strip().isdigit()

        until(counted, f"cell {i} shows an execution count", timeout)

    # -- the agent view ------------------------------------------------------------------------
    def agent_view(self, cell: int):
        view = self.output(cell).locator(".esc-view.esc-agent")
        view.wait_for(timeout=30_000)
        return view

    @staticmethod
    def stop_button(view):
        """The head's Stop (shown while a turn runs)."""
        return view.locator(".esc-head .esc-stop")

    def send(self, view, text: str, typed: bool = True, key: str | None = None) -> None:
        """Type the prompt in the view's box and send it: press Send, or ``key`` (``"Enter"``)."""
        box = view.locator("textarea.esc-box")
        box.click()
        if typed:
            box.press_sequentially(text, delay=5)
        else:
            box.fill(text)
        if key:
            box.press(key)
        else:
            view.locator(".esc-composer .esc-send").click()

    def status(self, view) -> str:
        return view.locator(".esc-head .esc-head-main .esc-status").inner_text()

    def wait_status(self, view, word: str, timeout: float = 30) -> None:
        until(lambda: word in self.status(view) or None, f"the agent's status says {word!r}", timeout)

    # -- pictures --------------------------------------------------------------------------------
    def shot(self, locator, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        locator.scroll_into_view_if_needed()
        self.page.mouse.move(0, 0)  # no hover effect in the picture
        locator.screenshot(path=str(path), animations="disabled")
        _written.append(path)
        if name in DOCS_SHOTS and os.environ.get("ESCOUADE_BROWSER_UPDATE_DOCS") == "1":
            size = path.stat().st_size
            assert size < DOCS_MAX_BYTES, f"{path} is {size} bytes, more than the README's {DOCS_MAX_BYTES}"
            DOCS.mkdir(exist_ok=True)
            shutil.copyfile(path, DOCS / path.name)
        return path

    def failure_shot(self, test_name: str) -> Path | str:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"FAILED-{test_name}.png"
        try:
            self.page.screenshot(path=str(path), full_page=True, timeout=10_000)
        except Exception as exc:  # the page may be gone
            return f"(no screenshot: {exc})"
        _written.append(path)
        return path


@pytest.fixture
def nb(request: pytest.FixtureRequest, lab_page: LabPage):
    """This test's notebook name, folder (under the server's root) and agent folder, in this
    test's page. After the test: its page closed, every kernel shut down, and nothing it
    started (kernel, agents) may be left."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    notebook = Notebook(lab_page, name)
    try:
        yield notebook
    finally:
        try:
            left = lab_page.finish()
        finally:
            shutil.rmtree(notebook.work, ignore_errors=True)
        if left:
            pytest.fail(f"{request.node.name} left processes behind (killed now): {left}")
