"""The agent's own sessions (``%escouade sessions AGENT``): one page of ACP ``session/list``
as rows that open or delete.

Each row says when the session was updated, its title and id, with **Open** (a new agent of
the same harness and folder on that session: ``Squad.open_session``, its view shown below
the list) and, where the agent offers ``session/delete``, **Delete**, which asks first
(**Confirm delete** / **Keep**) and then strikes the row. The text repr is the list as
:func:`~escouade_nb.core.render_text.sessions_text` writes it (plus what was done).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from ..core.acp_v1_25 import offers
from ..core.render_text import sessions_text
from .agent_view import AgentView, _run
from .render import esc
from .views import FullText, Releasing, close_tree, on_loop


class SessionsView(FullText, Releasing, w.VBox):
    """``page`` (a :class:`~escouade_nb.wire.session.SessionPage`) of ``agent``'s own
    sessions, from ``squad``. ``rows`` by session id; ``deleted`` the ids deleted here;
    ``opened`` the agents opened here; ``note`` what the last action said."""

    def __init__(self, squad: Any, agent: Any, page: Any) -> None:
        super().__init__(layout=w.Layout(border="1px solid var(--jp-border-color2, #d0d7de)", padding="6px"))
        self.add_class("escouade-sessions")
        self.squad, self.agent, self.page = squad, agent, page
        self.can_delete = offers(agent.agent_capabilities, "delete")
        self.deleted: set[str] = set()
        self.opened: list[Any] = []
        self.note = ""
        self.rows: dict[str, w.HBox] = {}
        self._note = w.HTML()
        self._shown = w.Output()
        self._opened_view: AgentView | None = None
        for info in page.sessions:
            self.rows[info["sessionId"]] = self._row(info)
        more = (f"<div style='color:var(--jp-ui-font-color1,#333);opacity:.8'>more: <code>%escouade sessions {esc(agent.name)} --cursor "
                f"{esc(page.next_cursor)}</code></div>" if page.next_cursor else "")
        head = w.HTML(f"<b>Sessions of {esc(agent.name)}</b>" if page.sessions else
                      f"{esc(agent.name)} has no sessions for this folder.")
        hidden = getattr(agent, "sessions_hidden", 0)
        self.hidden = (f"{hidden} session{'s' if hidden != 1 else ''} of other folders not listed ({agent.name} "
                       f"ignored the folder asked for): %escouade sessions {agent.name} --all lists them") if hidden else ""
        self.children = [head, *self.rows.values(), w.HTML(more), w.HTML(esc(self.hidden)), self._note, self._shown]

    def _row(self, info: dict[str, Any]) -> w.HBox:
        sid = info["sessionId"]
        label = w.HTML(f"<code>{esc(info.get('updatedAt') or '-')}</code> {esc(info.get('title') or '(untitled)')} "
                       f"<span style='color:var(--jp-ui-font-color1,#333);opacity:.8'>{esc(sid)}</span>")
        open_b = w.Button(description="Open", layout=w.Layout(width="auto"),
                          tooltip=f"Open session {sid} in a new agent ({self.agent.harness.short_id})")
        open_b.on_click(on_loop(lambda _b: self.open_session(sid)))
        buttons: list[w.Widget] = [open_b]
        if self.can_delete:
            delete_b = w.Button(description="Delete", button_style="danger", layout=w.Layout(width="auto"),
                                tooltip=f"Delete session {sid} (asks to confirm)")
            delete_b.on_click(on_loop(lambda _b: self.ask_delete(sid)))
            buttons.append(delete_b)
        return w.HBox([label, *buttons])

    # -- actions (the buttons call these; code may too) ----------------------------------------
    def open_session(self, session_id: str) -> Any:
        """Open ``session_id`` in a new agent; its view shows below the list. Returns the agent."""
        agent = self.squad.open_session(self.agent.name, session_id)
        self.opened.append(agent)
        self._say(f"opened {session_id} as {agent.name}")
        if self._opened_view is not None:
            self._opened_view.close()
        self._shown.clear_output()
        self._opened_view = view = AgentView(agent)
        with self._shown:
            from IPython.display import display
            display(view)
        return agent

    def ask_delete(self, session_id: str) -> None:
        """Ask to confirm the deletion of ``session_id`` (its row's buttons become
        **Confirm delete** and **Keep**)."""
        row = self.rows[session_id]
        confirm = w.Button(description="Confirm delete", button_style="danger", layout=w.Layout(width="auto"))
        keep = w.Button(description="Keep", layout=w.Layout(width="auto"))
        confirm.on_click(on_loop(lambda _b: _run(self.delete(session_id))))
        keep.on_click(on_loop(lambda _b: self._restore(session_id)))
        self._swap(session_id, w.HBox([row.children[0], confirm, keep]))

    def _restore(self, session_id: str) -> None:
        info = next(i for i in self.page.sessions if i["sessionId"] == session_id)
        self._swap(session_id, self._row(info))

    async def delete(self, session_id: str) -> bool:
        """``session/delete`` of ``session_id`` (confirmed): the row is struck; an error
        is said under the list. Returns whether it was deleted."""
        try:
            await self.agent.delete_session(session_id)
        except Exception as exc:
            self._say(f"could not delete {session_id}: {exc}")
            self._restore(session_id)
            return False
        self.deleted.add(session_id)
        info = next(i for i in self.page.sessions if i["sessionId"] == session_id)
        self._swap(session_id, w.HBox([w.HTML(f"<s>{esc(info.get('title') or '(untitled)')} {esc(session_id)}</s> "
                                              f"deleted")]))
        self._say(f"deleted {session_id}")
        return True

    def _swap(self, session_id: str, row: w.HBox) -> None:
        old, self.rows[session_id] = self.rows[session_id], row
        self.children = tuple(row if c is old else c for c in self.children)
        close_tree_except_label(old, row)

    def _say(self, text: str) -> None:
        self.note = text
        self._note.value = f"<div style='color:var(--jp-ui-font-color1,#333);opacity:.8'>{esc(text)}</div>"

    def release(self) -> None:
        if self._opened_view is not None:
            self._opened_view.close()  # the agent goes on; only its view here closes

    def __repr__(self) -> str:
        shown = [i for i in self.page.sessions if i["sessionId"] not in self.deleted]
        text = sessions_text(self.agent.name, shown, self.page.next_cursor)
        return text + (f"\n  {self.hidden}" if self.hidden else "") + (f"\n  ({self.note})" if self.note else "")


def close_tree_except_label(old: w.HBox, new: w.HBox) -> None:
    """Close a replaced row's widgets, except those the new row took over."""
    kept = {id(c) for c in new.children}
    for child in old.children:
        if id(child) not in kept:
            close_tree(child)
    old.close()
