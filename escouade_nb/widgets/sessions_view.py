"""The agent's own sessions (``%escouade sessions AGENT``): one page of ACP ``session/list``
as rows that open or delete — one widget model (:class:`~.front.FrontView`, kind
``sessions``) drawn by ``widgets/escouade.js``.

Each row says when the session was updated, its title and id, with **Open** (a new agent of
the same harness and folder on that session: ``Squad.open_session``, its view shown below
the list) and, where the agent offers ``session/delete``, **Delete**, which asks first
(**Confirm delete** / **Keep**) and then strikes the row. The text repr is the list as
:func:`~escouade_nb.core.render_text.sessions_text` writes it (plus what was done).

Saved form: the companion output before the widget is the list as a static table (deleted
rows struck, what was done under it), kept current; its ``text/plain`` the text repr.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import traitlets

from ..core.acp_v1_25 import offers
from ..core.render_text import sessions_text
from .agent_view import AgentView, _run
from .front import HIDE_ORPHAN, FrontView, static_page
from .render import esc
from .views import CurrentText


class SessionsView(CurrentText, FrontView):
    """``page`` (a :class:`~escouade_nb.wire.session.SessionPage`) of ``agent``'s own
    sessions, from ``squad``. ``deleted`` the ids deleted here; ``confirming`` the ids whose
    deletion is being asked; ``opened`` the agents opened here; ``note`` what the last
    action said. Actions (the front-end's buttons; :meth:`act` for code): ``open``,
    ``ask_delete``, ``keep``, ``delete``, each with the session's ``id``."""

    opened_view_model = traitlets.Instance(w.Widget, allow_none=True).tag(sync=True, **w.widget_serialization)

    def __init__(self, squad: Any, agent: Any, page: Any) -> None:
        super().__init__(kind="sessions")
        self.squad, self.agent, self.page = squad, agent, page
        self.can_delete = offers(agent.agent_capabilities, "delete")
        self.deleted: set[str] = set()
        self.confirming: set[str] = set()
        self.opened: list[Any] = []
        self.note = ""
        self._opened_view: AgentView | None = None
        self.actions.update(open=lambda m: self.open_session(self._id(m)),
                            ask_delete=lambda m: self.ask_delete(self._id(m)),
                            keep=lambda m: self.keep(self._id(m)),
                            delete=lambda m: _run(self.delete(self._id(m))))
        hidden = getattr(agent, "sessions_hidden", 0)
        self.hidden = (f"{hidden} session{'s' if hidden != 1 else ''} of other folders not listed ({agent.name} "
                       f"ignored the folder asked for): %escouade sessions {agent.name} --all lists them"
                       ) if hidden else ""

    def _id(self, message: dict) -> str:
        sid = str(message.get("id"))
        if not any(i["sessionId"] == sid for i in self.page.sessions):
            raise KeyError(f"no session {sid!r} in this list")
        return sid

    @property
    def ids(self) -> list[str]:
        """The sessions' ids, in the page's order."""
        return [i["sessionId"] for i in self.page.sessions]

    # -- actions (the buttons call these; code may too) ----------------------------------------
    def open_session(self, session_id: str) -> Any:
        """Open ``session_id`` in a new agent; its view shows below the list. Returns the agent."""
        agent = self.squad.open_session(self.agent.name, session_id)
        self.opened.append(agent)
        if self._opened_view is not None:
            self._opened_view.close()
        self._opened_view = AgentView(agent)
        self.opened_view_model = self._opened_view
        self._say(f"opened {session_id} as {agent.name}")
        return agent

    def ask_delete(self, session_id: str) -> None:
        """Ask to confirm the deletion of ``session_id`` (its row's buttons become
        **Confirm delete** and **Keep**)."""
        if self.can_delete and session_id not in self.deleted:
            self.confirming.add(session_id)
            self._changed()

    def keep(self, session_id: str) -> None:
        """**Keep**: the row is as it was."""
        self.confirming.discard(session_id)
        self._changed()

    async def delete(self, session_id: str) -> bool:
        """``session/delete`` of ``session_id`` (confirmed): the row is struck; an error
        is said under the list. Returns whether it was deleted."""
        self.confirming.discard(session_id)
        try:
            await self.agent.delete_session(session_id)
        except Exception as exc:
            self._say(f"could not delete {session_id}: {exc}")
            return False
        self.deleted.add(session_id)
        self._say(f"deleted {session_id}")
        return True

    def _say(self, text: str) -> None:
        self.note = text
        self._changed()

    def _changed(self) -> None:
        self.push([], 0, True)
        self.update_companion(final=True)

    # -- to the browser ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        rows = [{"id": i["sessionId"], "updated": str(i.get("updatedAt") or "-"),
                 "title": str(i.get("title") or "(untitled)"), "state": "deleted" if i["sessionId"] in self.deleted else
                 "confirm" if i["sessionId"] in self.confirming else "shown"} for i in self.page.sessions]
        return {"agent": self.agent.name, "harness": self.agent.harness.short_id, "rows": rows,
                "can_delete": self.can_delete, "more": self.page.next_cursor, "note": self.note, "hidden": self.hidden}

    def collect(self) -> tuple[list, bool]:
        return self.state_if_changed("ss", self.state())

    # -- saved form -------------------------------------------------------------------------------
    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        name = esc(self.agent.name)
        if not self.page.sessions:
            body = f"<div>{name} has no sessions for this folder.</div>"
        else:
            rows = []
            for i in self.page.sessions:
                sid = i["sessionId"]
                cells = (f"<td><code>{esc(i.get('updatedAt') or '-')}</code></td>"
                         f"<td>{esc(i.get('title') or '(untitled)')}</td>"
                         f"<td class='esc-dim'>{esc(sid)}</td>")
                if sid in self.deleted:
                    cells = f"<td colspan='3'><s>{esc(i.get('title') or '(untitled)')} {esc(sid)}</s> deleted</td>"
                rows.append(f"<tr>{cells}</tr>")
            body = (f"<div class='esc-head'><b>Sessions of {name}</b></div>"
                    f"<div class='esc-table-wrap'><table class='esc-squad-table esc-sessions-table'>"
                    f"<thead><tr><th>updated</th><th>title</th><th>session</th></tr></thead>"
                    f"<tbody>{''.join(rows)}</tbody></table></div>")
        if self.page.next_cursor:
            body += (f"<div class='esc-dim'>more: <code>%escouade sessions {name} --cursor "
                     f"{esc(self.page.next_cursor)}</code></div>")
        if self.hidden:
            body += f"<div class='esc-dim'>{esc(self.hidden)}</div>"
        if self.note:
            body += f"<div class='esc-dim'>{esc(self.note)}</div>"
        html = static_page(f'<div class="esc-view esc-sessions esc-saved">{body}</div>') + HIDE_ORPHAN
        return {"text/plain": repr(self), "text/html": html}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self.show(display({"text/plain": ""}, raw=True, display_id=True),
                  display({"text/plain": ""}, raw=True, display_id=True))  # the list is final at once

    def release(self) -> None:
        if self._opened_view is not None:
            self._opened_view.close()  # the agent goes on; only its view here closes

    def __repr__(self) -> str:
        shown = [i for i in self.page.sessions if i["sessionId"] not in self.deleted]
        text = sessions_text(self.agent.name, shown, self.page.next_cursor)
        return text + (f"\n  {self.hidden}" if self.hidden else "") + (f"\n  ({self.note})" if self.note else "")
