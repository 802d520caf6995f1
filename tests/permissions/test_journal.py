"""The journal (plain-text lines, JSON lines per plugin, filters, the widget), the user's
plugin states, and projects."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from escouade_nb.permissions.journal import JOURNAL_ENV, Entry, Journal, journal_dir
from escouade_nb.permissions.states import CONFIG_ENV, PluginStates, config_dir
from escouade_nb.manifest.project import Project, ProjectFileError, project_id, read_project_config
from escouade_nb.widgets.journal_view import JournalView

T = datetime(2025, 5, 6, 14, 3, 12).astimezone()


def entry(**kw) -> Entry:
    return Entry(time=T, plugin="dev.x.team-rules", kind="Decision", **kw)


def test_plain_text_lines_are_the_seeds():
    assert entry(verdict="refused", tool="Bash", target="rm -rf build", delay_ms=1.2,
                 message="no rm -rf here").text() == "14:03:12  Decision  refused Bash rm -rf build (2 ms): no rm -rf here"
    assert entry(verdict="allowed", tool="Bash", target="npm test", delay_ms=0.3).text() == \
        "14:03:12  Decision  allowed Bash npm test (1 ms)"
    assert entry(verdict="did not decide", tool="Bash", target="cargo build", reason="no answer in time",
                 then="the user is asked").text() == \
        "14:03:12  Decision  did not decide Bash cargo build: no answer in time; the user is asked"
    assert entry(verdict="allowed", tool="Bash", target="x", delay_ms=300, applied=False,
                 then="you answered first").text() == \
        "14:03:12  Decision  allowed Bash x (300 ms) — not applied: you answered first"
    assert Entry(time=T, plugin="p", kind="Crash", text="exited with code 3").text() == \
        "14:03:12  Crash  exited with code 3"


def test_json_lines_per_plugin_survive_a_new_journal(tmp_path: Path):
    j = Journal(tmp_path)
    j.add("dev.x.a", "Decision", verdict="allowed", tool="Bash", target="npm test", delay_ms=1.0)
    j.add("dev.x.b", "Start", "started (pid 1, ready in 3 ms)")
    j.add("dev.x.a", "Decision", verdict="refused", tool="Bash", target="rm -rf /", delay_ms=1.0, message="no")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.x.a.jsonl", "dev.x.b.jsonl"]
    first = json.loads((tmp_path / "dev.x.a.jsonl").read_text().splitlines()[0])
    assert first["kind"] == "Decision" and first["delayMs"] == 1.0 and first["plugin"] == "dev.x.a"
    with open(tmp_path / "dev.x.a.jsonl", "a") as fh:
        fh.write('{"torn": \n')  # a torn line is skipped
    again = Journal(tmp_path)
    assert again.plugins() == ["dev.x.a", "dev.x.b"]
    assert [e.verdict for e in again.entries("dev.x.a")] == ["allowed", "refused"]
    assert len(again.entries()) == 3
    assert [e.target for e in again.entries(kind="Decision", text="REFUSED")] == ["rm -rf /"]
    assert again.entries(since=datetime.now().astimezone() + timedelta(hours=1)) == []


def test_journal_and_config_folders(monkeypatch, tmp_path: Path):
    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path / "j"))
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "c"))
    assert journal_dir() == tmp_path / "j"
    assert config_dir() == tmp_path / "c"
    assert PluginStates().path == tmp_path / "c" / "plugins.json"
    monkeypatch.delenv(JOURNAL_ENV)
    from jupyter_core.paths import jupyter_data_dir
    assert journal_dir() == Path(jupyter_data_dir()) / "escouade_nb" / "journal"


def test_the_widget_filters_and_follows(tmp_path: Path):
    j = Journal(tmp_path)
    j.add("dev.x.a", "Start", "started")
    j.add("dev.x.a", "Decision", verdict="refused", tool="Bash", target="rm -rf build", delay_ms=2, message="no")
    view = JournalView(j, plugin="dev.x.a", names={"dev.x.a": "Team rules"})
    text = repr(view)
    assert text.splitlines()[0] == "Journal of Team rules, Decision entries:"
    assert "refused Bash rm -rf build (2 ms): no" in text and "started" not in text
    sent: list = []
    view.send = lambda content, buffers=None: sent.append(content)
    j.add("dev.x.a", "Decision", verdict="allowed", tool="Bash", target="npm test", delay_ms=1)  # followed: appended
    assert [op[1]["body"] for m in sent for op in m["ops"] if op[0] == "je"] == ["allowed Bash npm test (1 ms)"]
    j.add("dev.x.a", "Start", "started again")  # not a Decision: not shown
    assert sum(op[0] == "je" for m in sent for op in m["ops"]) == 1
    view.act({"k": "act", "act": "filter", "plugin": "dev.x.a", "kind": "Decision", "text": "npm"})  # the text box
    assert [e.target for e in view.entries()] == ["npm test"]
    rows = [op[1]["rows"] for m in sent for op in m["ops"] if op[0] == "jr"][-1]
    assert [r["body"] for r in rows] == ["allowed Bash npm test (1 ms)"]
    view.set_filter(kind="All", text="")
    assert len(view.entries()) == 4
    view.act({"k": "act", "act": "filter", "plugin": "", "kind": "All", "text": ""})  # the plugin menu: all
    assert repr(view).startswith("Journal of all plugins:")
    assert view.state()["all_plugins"] and view.state()["plugins"] == [["Team rules", "dev.x.a"]]
    view.close()


def test_states_on_off_private_revoke_and_a_broken_file(tmp_path: Path):
    path = tmp_path / "plugins.json"
    st = PluginStates(path)
    public = Project("p1", "pub", tmp_path, False)
    private = Project("p2", "sec", tmp_path, True)
    assert st.is_on("x", public, default=True) and not st.is_on("x", public, default=False)
    assert not st.is_on("x", private, default=True)
    st.set_project("x", private, True)
    assert st.is_on("x", private, default=False)
    st.set_default("x", False)
    assert not st.is_on("x", public, default=True) and st.wanted("x", default=False)
    st.set_decide("x", False)
    assert not st.is_on("x", private, default=True) and not st.wanted("x", default=True)
    # another kernel writes the file: it is read again
    data = json.loads(path.read_text())
    data["plugins"]["x"]["decide"] = True
    path.write_text(json.dumps(data))
    os.utime(path, ns=(1, 1))
    assert PluginStates(path).is_on("x", private, default=False)
    path.write_text("{not json")
    broken = PluginStates(path)
    assert not broken.is_on("x", private, default=True) and broken.error


def test_projects(tmp_path: Path):
    folder = tmp_path / "proj"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    a, b = Project.for_folder(folder), Project.for_folder(link)
    assert a.id == b.id == project_id(folder) and a.folder == folder.resolve()
    assert a.name == "proj" and not a.private
    assert Project.for_folder(folder, private=True).private
    (folder / ".escouade.yml").write_text("# ours\nname: 'Escouade'  \nprivate: yes # keep it\n"
                                          "plugins:\n  team-rules: on\ndecide: true\n")
    c = Project.for_folder(folder)
    assert (c.name, c.private) == ("Escouade", True)
    assert set(read_project_config(folder).model_dump()) == {"name", "private", "review", "sandbox"}
    (folder / ".escouade.yml").write_text("private: false\n")
    assert Project.for_folder(folder, private=True).private  # the flag only adds privacy
    assert a.wire() == {"id": a.id, "name": "proj", "private": False}


def test_a_project_file_that_is_not_yaml_is_refused_naming_the_file_and_line(tmp_path: Path):
    """One reader of .escouade.yml (PyYAML): a file it cannot read is said, never taken for
    "not private"; a bad value of one key leaves that key at its default, the others kept."""
    (tmp_path / ".escouade.yml").write_text("name: x\nprivate: [yes\n")
    with pytest.raises(ProjectFileError, match=r"\.escouade\.yml: not YAML \(line 3\)"):
        Project.for_folder(tmp_path)
    (tmp_path / ".escouade.yml").write_text("- private\n")
    with pytest.raises(ProjectFileError, match="not a mapping"):
        read_project_config(tmp_path)
    (tmp_path / ".escouade.yml").write_text("name: 2026\nprivate: maybe\nsandbox: on\nworktree:\n  copy: [.env]\n")
    config = read_project_config(tmp_path)
    assert (config.name, config.private, config.sandbox, config.review) == ("2026", False, True, False)
    (tmp_path / ".escouade.yml").write_text("")
    assert read_project_config(tmp_path) == read_project_config(tmp_path / "missing")


@pytest.mark.parametrize("value, private", [("true", True), ("on", True), ("no", False), ("maybe", False),
                                            ("'yes'", True), ("0", False)])
def test_project_private_values(tmp_path: Path, value, private):
    (tmp_path / ".escouade.yml").write_text(f"private: {value}\n")
    assert Project.for_folder(tmp_path).private is private


_OPENS: list[tuple[int, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENS is not None:
        path, mode = args[0], args[1]
        if isinstance(path, str) and isinstance(mode, str) and ("a" in mode or "w" in mode):
            _OPENS.append((threading.get_ident(), path))


def test_adds_on_a_running_loop_do_no_file_io_on_the_loop(tmp_path: Path):
    """Entries reach memory and subscribers at once; their lines are appended by the
    writer thread, in order, and all are on disk after flush()."""
    global _OPENS
    sys.addaudithook(_audit)  # stays for the session; records only while _OPENS is a list
    journal = Journal(tmp_path / "j")
    seen = []
    journal.subscribe(seen.append)

    async def main():
        loop_thread = threading.get_ident()
        for i in range(500):
            journal.add("dev.x.a" if i % 3 else "dev.x.b", "Decision", verdict="allowed", tool="Bash",
                        target=f"cmd {i}", delay_ms=1.0)
            assert len(seen) == i + 1  # the subscribers are told at once
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the writer interleave with the adds
        in_memory = len(journal.entries())
        await journal.aclose()
        return loop_thread, in_memory

    _OPENS = []
    try:
        loop_thread, in_memory = asyncio.run(main())
        journal.flush()
        opens = list(_OPENS)
    finally:
        _OPENS = None
    assert in_memory == 500
    ours = [(t, p) for t, p in opens if p.startswith(str(tmp_path))]
    assert ours, "the journal wrote nothing"
    assert not [p for t, p in ours if t == loop_thread], "file I/O on the loop's thread"
    assert len(ours) < 500  # batched: not one open per entry
    a = [json.loads(x)["target"] for x in (tmp_path / "j" / "dev.x.a.jsonl").read_text().splitlines()]
    b = [json.loads(x)["target"] for x in (tmp_path / "j" / "dev.x.b.jsonl").read_text().splitlines()]
    assert a == [f"cmd {i}" for i in range(500) if i % 3]  # in order, none lost
    assert b == [f"cmd {i}" for i in range(500) if not i % 3]


def test_flush_writes_what_is_queued_from_any_thread_and_old_lines_are_not_read_twice(tmp_path: Path):
    before = Journal(tmp_path)
    for i in range(3):
        before.add("dev.x.a", "Start", f"old {i}")  # no loop: written at once
    journal = Journal(tmp_path)

    async def main():
        for i in range(3):
            journal.add("dev.x.a", "Start", f"new {i}")
        return [e.text_ for e in journal.entries("dev.x.a")]

    during = asyncio.run(main())
    done = threading.Thread(target=journal.flush)  # as at interpreter exit: no loop, another thread
    done.start()
    done.join()
    lines = [json.loads(x)["text"] for x in (tmp_path / "dev.x.a.jsonl").read_text().splitlines()]
    expected = [f"old {i}" for i in range(3)] + [f"new {i}" for i in range(3)]
    assert lines == expected
    assert during == expected and [e.text_ for e in journal.entries("dev.x.a")] == expected
    assert [e.text_ for e in Journal(tmp_path).entries("dev.x.a")] == expected


def test_the_journal_command_returns_data_and_imports_no_widget(tmp_path: Path):
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from escouade_nb.permissions import Journal, PluginStates, RulePlugins
        from escouade_nb.permissions.commands import JournalQuery, journal_command
        tmp = Path({str(tmp_path)!r})
        rules = RulePlugins(journal=Journal(tmp / "j"), states=PluginStates(tmp / "c.json"))
        rules.journal.add("dev.x.a", "Decision", verdict="allowed", tool="Bash", target="npm test", delay_ms=1)
        query = journal_command(rules, ["dev.x.a"])
        assert isinstance(query, JournalQuery) and query.plugin == "dev.x.a" and query.kind == "Decision"
        print(repr(query))
        print(sorted(m for m in sys.modules if m.startswith(("ipywidgets", "escouade_nb.widgets"))))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Journal of dev.x.a, Decision entries:"
    assert lines[1].endswith("Decision  allowed Bash npm test (1 ms)")
    assert lines[-1] == "[]"
