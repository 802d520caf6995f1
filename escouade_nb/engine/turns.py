"""Prompt turns: :class:`Turn` (one ``session/prompt``), and the agent's queue of them.

One turn runs at a time; later sends wait their turn, in order. A turn waits for the
session to be ready (after a start, a restart or a sign-in), runs on whichever session
is current then, and always ends — with the agent's stop reason, or an error saying why
(the agent exited, refused, wants a sign-in, or was closed before the turn ran).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import acp
import anyio
from pydantic import ValidationError

from ..core.conversation import STOPPED_BY_YOU, Item, Message, ToolCall
from ..core.prompt import ATTACH_EMBED_MAX, attachment_block, context, gate, steered_part, steered_part_of
from ..core.status import ENDED, AgentStatus
from ..wire.errors import AgentError, AuthRequired, running_loop
from ..wire.transcript import UNSENT_EVENT

if TYPE_CHECKING:
    from .interfaces import TurnsAgent

log = logging.getLogger(__name__)

INSTANT_TURN = 0.25
"""Seconds under which a turn that says nothing, right after a Stop, is taken for
claude-agent-acp 0.23.1's bug (its next turn ends in ~5 ms, empty, and its replies come
one turn late from then on): the conversation says so and points at Restart."""

_turn_ids = itertools.count(1)


class Turn:
    """One prompt turn. ``await turn`` waits for its end and returns the turn itself;
    it raises :class:`AgentError` (e.g. :class:`AgentExited`, :class:`AuthRequired`) if
    the turn failed.

    ``stop_reason``: ACP's (``end_turn``, ``cancelled``, ``max_tokens``…), None while
    running or on failure; ``text``: the agent's reply text of this turn; ``tool_calls``;
    ``items``: everything the turn added to the conversation; ``error``: the failure;
    ``status``: ``queued``, ``running``, then the stop reason, ``done`` or ``failed``
    (``dropped``: taken out of the queue before it ran, :meth:`drop`). ``id``: a number
    unique in the kernel; ``steered``: a prompt sent while another turn ran, that stopped
    it (``agent.steer``); ``tokens``: the tokens its answer reported (ACP
    ``PromptResponse.usage.totalTokens``), None when it reported none (what budgets count:
    :mod:`.budget`)."""

    def __init__(self, agent: Any, prompt: list[dict[str, Any]], attach: list[Path] | None = None) -> None:
        self.agent = agent
        self.prompt = prompt
        self.attach = list(attach or [])
        self.items: list[Item] = []
        self.stop_reason: str | None = None
        self.error: AgentError | None = None
        self.cancelled_by_user = False
        self.status = "queued"
        self.started: float | None = None  # time.monotonic() when it was sent to the agent
        self.ended: float | None = None  # …and when it ended
        self.usage_before: dict[str, Any] | None = None  # the agent's usage when it was sent (per-turn deltas)
        self.usage_after: dict[str, Any] | None = None  # …and when it ended (a later turn's must not count)
        self.tokens: int | None = None  # the tokens its answer reported (PromptResponse usage.totalTokens)
        self.id = next(_turn_ids)
        self.steered = False
        self._done = running_loop("agent.send()").create_future()  # NoEventLoop, said plainly, outside a loop

    @property
    def done(self) -> bool:
        return self._done.done()

    @property
    def duration(self) -> float | None:
        """Seconds from its sending to its end (None until it ends, or when never sent)."""
        return self.ended - self.started if self.started is not None and self.ended is not None else None

    @property
    def text(self) -> str:
        return "".join(i.text for i in self.items if isinstance(i, Message) and i.role == "agent")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [i for i in self.items if isinstance(i, ToolCall)]

    def _finish(self, stop_reason: str | None = None, error: AgentError | None = None) -> None:
        if self._done.done():
            return
        self.stop_reason = stop_reason
        self.error = error
        self.ended = time.monotonic()
        if self.usage_before is not None:
            self.usage_after = dict(self.agent.conversation.usage or {})
        self.status = "failed" if error else (stop_reason or "done")
        self._done.set_result(None)

    async def wait(self) -> Turn:
        await asyncio.shield(self._done)
        if self.error is not None:
            raise self.error
        return self

    def __await__(self):
        return self.wait().__await__()

    def add_done_callback(self, fn: Callable[[Turn], object]) -> None:
        """Call ``fn(turn)`` on the loop once the turn has ended (at once if it has)."""
        self._done.add_done_callback(lambda _f: fn(self))

    def edit(self, text: str) -> Turn:
        """Replace the words of this queued prompt with ``text`` (its attachments and
        kernel context stay); returns the turn. :class:`AgentError` once it has started
        (or ended), ``ValueError`` for empty text."""
        if not text.strip():
            raise ValueError("a prompt needs some text; drop() takes it out of the queue")
        if self.status != "queued" or self.done:
            raise AgentError(f"this prompt is {self.status}: only a queued prompt can be edited")
        others = [b for b in self.prompt if not (isinstance(b, dict) and b.get("type") == "text")]
        self.prompt = [{"type": "text", "text": text}, *others]
        self.agent.turns.agent.budget.show_held()  # a budget card waiting names the prompts it holds
        self.agent.turns.agent.notify_status()  # the views list the queue (the queue's agent: the state)
        return self

    def drop(self) -> None:
        """Take this queued prompt out of the queue: it is never sent, and ends with status
        ``dropped`` (``await turn`` returns it, ``stop_reason`` None). :class:`AgentError`
        once it has started (or ended)."""
        if self.status != "queued" or self.done:
            raise AgentError(f"this prompt is {self.status}: only a queued prompt can be dropped")
        self._finish()
        self.status = "dropped"
        self.agent.turns.agent.budget.show_held()
        self.agent.turns.agent.notify_status()

    def __repr__(self) -> str:
        state = self.status if not self.error else f"failed: {str(self.error).splitlines()[0]}"
        steered = "steered, " if self.steered else ""
        return f"<Turn {self.agent.name} {steered}{state}: {len(self.text)} chars, {len(self.tool_calls)} tool calls>"


def _read_attachment(path: Path) -> bytes | None:
    """The file's bytes, or None when it is too big to embed (runs in a thread)."""
    if path.stat().st_size > ATTACH_EMBED_MAX:
        return None
    return path.read_bytes()


class TurnQueue:
    """The turns of one agent: ``send`` queues, one runs at a time. ``current`` is the
    running turn. The queue owns every turn task; :meth:`close` cancels them (each
    turn still ends, with an error)."""

    def __init__(self, agent: TurnsAgent) -> None:
        self.agent = agent
        self.current: Turn | None = None
        self.stopped_in: Any = None  # the Live whose last turn the user stopped (for the instant-turn check)
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._sent: list[Turn] = []  # turns sent, pruned to those still queued (see queued)
        self.steered: list[Turn] = []  # run right after the running turn, before the queued ones (agent.steer)
        self.holds: set[asyncio.Future] = set()  # steering requests in flight: the turn's followers wait for them
        self.unsent: list[Any] | None = None  # the running turn's prompt as it will go, until it goes (see join)

    def send(self, turn: Turn) -> Turn:
        task = asyncio.get_running_loop().create_task(self._run(turn), name=f"escouade turn {self.agent.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._sent.append(turn)
        if self.current is not None and not self.current.done:  # it waits: views show it queued
            self.agent.notify_status()
        return turn

    @property
    def queued(self) -> list[Turn]:
        """The turns sent but not started yet, in the order they will run (a steered
        prompt first); each can be edited or dropped (:meth:`Turn.edit`, :meth:`Turn.drop`)."""
        self._sent = [t for t in self._sent if t.status == "queued" and not t.done]
        return [t for t in self.steered if t.status == "queued" and not t.done] + self._sent

    @property
    def tasks(self) -> frozenset[asyncio.Task]:
        """The turn tasks not finished yet (queued or running)."""
        return frozenset(self._tasks)

    def held(self) -> asyncio.Lock:
        """The queue's lock, as ``async with turns.held():``: while it is held no prompt turn
        starts (they wait, in order). A rewind holds it (:mod:`.review.checkpoints`)."""
        return self._lock

    def close(self) -> None:
        """Cancel every queued and running turn task (their turns end with an error)."""
        for task in list(self._tasks):
            task.cancel()

    async def _run(self, turn: Turn) -> None:
        agent = self.agent
        try:
            async with self._lock:
                if not turn.done:  # else dropped while it waited
                    await self._prompt(turn)
                await self._follow()
        except asyncio.CancelledError:
            turn._finish(error=AgentError(f"agent {agent.name!r} was closed; the prompt was not answered"))
            self._end_steered()
            raise
        except Exception as exc:  # a bug of ours: the turn still ends, saying why
            log.exception("turn failed")
            turn._finish(error=AgentError(f"agent {agent.name!r}: {exc}"))

    async def _follow(self) -> None:
        """Run the steered prompts (:attr:`steered`) before the lock goes to a queued turn,
        once the steering requests in flight are answered; closed: each ends with an error."""
        while self.holds or self.steered:
            if self.holds:
                await asyncio.wait(list(self.holds))
                continue
            turn = self.steered.pop(0)
            if not turn.done:
                try:
                    await self._prompt(turn)
                except asyncio.CancelledError:
                    turn._finish(error=AgentError(f"agent {self.agent.name!r} was closed; the prompt was not "
                                                  f"answered"))
                    raise

    def _end_steered(self) -> None:
        """The agent was closed: the steered prompts not run end with an error."""
        for turn in self.steered:
            turn._finish(error=AgentError(f"agent {self.agent.name!r} was closed; the prompt was not answered"))
        self.steered.clear()

    async def _prompt(self, turn: Turn) -> None:
        """Run ``turn``: sent once the session is ready; its answer, or why there is none,
        says how it ends."""
        if not await self._ready_to_send(turn) or turn.done:  # done: dropped while it waited (the budget card…)
            return
        files = self.agent.file_watch  # review=True: the folder before the turn
        if files is not None:
            await files.before_turn()
            if turn.done:
                return
        live = self.agent.live
        session = live.session
        wire_prompt, primer = self._begin(turn, live)
        self.unsent = wire_prompt  # until it is sent, a steer joins it (join)
        try:
            checkpoints = self.agent.folder_checkpoints
            if checkpoints is not None:  # the agent's folder before the turn (engine/review/checkpoints.py)
                await checkpoints.before_prompt(turn, live)
            if turn.cancelled_by_user:  # Stop while the checkpoint was taken: nothing is sent
                live.cancel_sent = False
                if self.agent.transcript is not None:  # shown, never sent: the record says so (a resume shows it)
                    self.agent.transcript.event(UNSENT_EVENT, prompt=turn.prompt, steered=turn.steered)
                if files is not None:
                    await files.after_turn()
                self.agent.conversation.add_notice(STOPPED_BY_YOU)
                turn._finish(stop_reason="cancelled")
                return
            mark = {"escouade": {"steered": True}} if turn.steered else {}  # _meta: the transcript says it
            self.unsent = None  # from here a steer stops the turn: its prompt is on its way
            self.agent.budget.turn_started()  # its seconds count from the prompt sent
            self.agent.activity_watch.turn_started()  # …and its quiet spells (engine/activity.py)
            response = await session.conn.prompt(session_id=session.session_id, prompt=wire_prompt, **mark)
        except Exception as exc:
            if files is not None:  # its changes pend review by the time ``await turn`` returns
                await files.after_turn()
            await self._unanswered(turn, live, exc, primer)
        else:
            if files is not None:
                await files.after_turn()
            self._answered(turn, live, response)
        finally:
            if turn.cancelled_by_user or turn.stop_reason == "cancelled":
                self.stopped_in = live
            elif turn.stop_reason is not None or turn.error is not None:
                self.stopped_in = None
            self.current = None
            self.unsent = None
            live.cancel_sent = False
            self.agent.budget.turn_ended(turn.tokens)
            self.agent.turn_ended(turn)

    def join(self, content: list[dict[str, Any]]) -> Turn | None:
        """A steer (``agent.steer``) while the running turn's prompt is not sent yet (its
        checkpoint is being taken): nothing runs on the agent's side, so nothing is stopped
        — ``content`` joins that prompt. The one ``session/prompt`` carries the user's prompt,
        then the steered blocks (fitted to what the agent takes, each marked
        :func:`~..core.prompt.steered_part`), and the conversation shows them at once as a
        message of their own, marked steered, as the transcript's replay does. Returns the
        running turn (it carries the text); None when no prompt waits to be sent (none runs,
        it is sent, or a Stop came for it)."""
        turn, wire = self.current, self.unsent
        if turn is None or turn.done or wire is None or turn.cancelled_by_user:
            return None
        agent = self.agent
        takes = agent.agent_capabilities.get("promptCapabilities") or {}
        fitted, notices = gate(content, takes, who=agent.name)
        for notice in notices:
            agent.conversation.add_notice(notice, level="warning")
        n = 1 + max((steered_part_of(b) or 0 for b in wire if isinstance(b, dict)), default=0)
        marked = [steered_part(b, n) for b in fitted]
        wire.extend(marked)
        turn.prompt = [*turn.prompt, *marked]  # a sign-in's retry sends them too
        agent.conversation.add_user_message(marked, sent=wire, steered=True)  # an echo of the whole is folded
        return turn

    async def _ready_to_send(self, turn: Turn) -> bool:
        """Read the turn's attachments and wait for the session; False when the turn
        ended instead (the agent has ended, or could not start)."""
        agent = self.agent
        await agent.reconnected()  # an agent by URL whose connection dropped: sent once it is back
        if agent.status in ENDED and not agent.restarting:
            turn._finish(error=AgentError(f"agent {agent.name!r} is {agent.status}; the prompt was not sent"))
            return False
        if turn.attach:
            blocks = [attachment_block(p, await asyncio.to_thread(_read_attachment, p)) for p in turn.attach]
            turn.prompt = [*turn.prompt, *blocks]  # after the reads: an edit made meanwhile is kept
            turn.attach = []
        try:
            await agent.ready()
        except AgentError as exc:
            turn._finish(error=exc)
            return False
        if not await agent.budget.hold():  # a spent budget: its card first
            agent.conversation.add_notice("Not sent: the budget card was answered Stop.", level="warning")
            turn.cancelled_by_user = True
            turn._finish(stop_reason="cancelled")
            return False
        return True

    def _begin(self, turn: Turn, live: Any) -> tuple[list[Any], dict[str, Any] | None]:
        """The turn runs: its prompt fitted to what the agent takes (notices for what is
        left out), in the conversation; returns the prompt as sent — before the user's
        words, each block marked as ours (context, not commands): the questionsInText
        instruction and a --system-prompt where no systemPrompt took them; a fork's
        conversation so far (``primer``, also returned)."""
        agent = self.agent
        self.current = turn
        turn.status = "running"
        turn.started = time.monotonic()
        turn.usage_before = dict(agent.conversation.usage or {})
        agent.set_status(AgentStatus.WORKING)
        takes = agent.agent_capabilities.get("promptCapabilities") or {}
        turn.prompt, notices = gate(turn.prompt, takes, who=agent.name)
        for notice in notices:
            agent.conversation.add_notice(notice, level="warning")
        preamble = live.take_preamble()
        primer = agent.take_primer()
        carried = gate([primer], takes)[0] if primer else []
        review = agent.edit_review
        told = review.take_notice() if review is not None else None  # the user's Reject, told once
        if review is not None:
            review.new_turn()  # the user's changes are told for the cells touched in this turn
        wire_prompt = [*([context({"type": "text", "text": preamble}, "preamble")] if preamble else []),
                       *([context({"type": "text", "text": told}, "notice")] if told else []),
                       *carried, *turn.prompt]
        agent.conversation.add_user_message(turn.prompt, sent=wire_prompt, steered=turn.steered)
        return wire_prompt, primer

    async def _unanswered(self, turn: Turn, live: Any, exc: Exception, primer: dict[str, Any] | None) -> None:
        """The prompt got no ACP answer: the process ended, the agent answered an error
        (a sign-in wanted: the prompt, and ``primer``, kept for the retry), or an answer
        the SDK's schema refuses; the turn ends saying so."""
        agent, session = self.agent, live.session
        if isinstance(exc, ConnectionError):
            with anyio.move_on_after(5):
                await session.exited.wait()
            turn._finish(error=live.turn_error())
        elif isinstance(exc, acp.RequestError):
            if exc.code == acp.RequestError.auth_required().code:
                refused = AuthRequired(f"agent {agent.name!r}: {exc}", agent.auth_methods)
                agent.wants_sign_in(refused, turn.prompt, primer)  # sent again after a terminal sign-in
                turn._finish(error=refused)
            else:
                agent.conversation.add_notice(f"The agent answered the prompt with an error: {exc}", level="error",
                                              detail=json.dumps(exc.data, default=str) if exc.data else "")
                turn._finish(error=AgentError(f"agent {agent.name!r} failed the turn: {exc}"))
        elif isinstance(exc, ValidationError):  # e.g. a stop reason outside ACP's list
            answer = session.prompt_answer or {}
            stop = answer.get("stopReason")
            if isinstance(stop, str) and stop:
                agent.questions_from_text(turn)
                agent.conversation.add_notice(f"The agent ended the turn with a stop reason outside ACP's list: "
                                              f"{stop!r}.", level="warning")
                turn._finish(stop_reason=stop)
            else:
                agent.conversation.add_notice("The agent's answer to the prompt could not be read.", level="error",
                                              detail=json.dumps(answer, default=str)[:2000])
                turn._finish(error=AgentError(f"agent {agent.name!r} answered the prompt with something that is "
                                              f"not an ACP answer"))
        else:  # a bug of ours: the turn fails, the agent lives on
            log.error("prompt failed", exc_info=exc)
            turn._finish(error=AgentError(f"agent {agent.name!r}: {exc}"))

    def _answered(self, turn: Turn, live: Any, response: Any) -> None:
        """The agent answered the prompt: the turn ends with its stop reason (a
        ``questionsInText`` question, a refusal, a Stop said in the conversation)."""
        agent = self.agent
        if live.session.closing and not turn.cancelled_by_user:
            # closed during the turn: an agent offering session/close answers the prompt ``cancelled``
            # (as if session/cancel had been sent); the turn ends as with one that does not
            turn._finish(error=live.turn_error())
            return
        usage = getattr(response, "usage", None)
        turn.tokens = getattr(usage, "total_tokens", None)
        agent.questions_from_text(turn)
        if response.stop_reason == "refusal":
            agent.conversation.add_notice("The agent refused this prompt (stop reason: refusal); "
                                          "your text is kept above.", level="warning")
        self._instant_after_stop(turn, live, response.stop_reason)
        if response.stop_reason == "cancelled" and turn.cancelled_by_user:
            agent.conversation.add_notice(STOPPED_BY_YOU)  # the turn's last item (a resume rebuilds it too)
        turn._finish(stop_reason=response.stop_reason)

    def _instant_after_stop(self, turn: Turn, live: Any, stop_reason: str) -> None:
        """A turn right after a Stop, on the same process, that ended at once with nothing
        (no reply, no tool call): say that the agent did not answer this prompt and may now
        be a turn behind, and that Restart starts afresh (claude-agent-acp 0.23.1 does this;
        the manifest's ``$comment`` says so)."""
        if self.stopped_in is not live or stop_reason == "cancelled" or turn.started is None:
            return
        elapsed = time.monotonic() - turn.started
        if elapsed >= INSTANT_TURN or turn.text.strip() or turn.tool_calls:
            return
        self.agent.conversation.add_notice(
            f"The agent ended this turn in {elapsed * 1000:.0f} ms with nothing, right after a Stop: it did not "
            f"answer this prompt, and its next replies may come one turn late. Restart it (the Restart button, or "
            f"`await agent.restart()`: a new process and session, the conversation above kept) to go on.",
            level="warning")

    def cancel(self) -> None:
        """Stop the running turn (see :meth:`Agent.cancel`)."""
        agent, turn = self.agent, self.current
        live = agent.live
        if turn is None or live is None or live.session.session_id is None:
            return
        turn.cancelled_by_user = True
        if live.cancel_sent or self.unsent is not None:  # a double click on Stop sends one session/cancel;
            return  # its prompt not sent yet (its checkpoint is taken): nothing runs to cancel, it is not sent
        live.cancel_sent = True
        session = live.session

        # cancelling the parent cancels its running children: a session/cancel for each
        # subagent that allows it (capabilities.cancel), after the parent's (ACP subagents)
        children = [s.session_id for s in agent.conversation.subagents.values() if s.running and s.can_cancel]

        async def notify() -> None:
            try:
                await session.conn.cancel(session_id=session.session_id)
                for child in children:
                    await session.conn.cancel(session_id=child)
            except ConnectionError:
                pass

        session.start_soon(notify)
        live.desk.cancel_pending("you stopped the turn", text_questions=False)
        agent.conversation.cancel_unfinished()
