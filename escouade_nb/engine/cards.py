"""What waits on an answer: permission cards, question cards, and the desk of one session.

A :class:`PermissionCard` is one ``session/request_permission`` of the agent; a
:class:`QuestionCard` one ``elicitation/create`` (or questions written in text). Each
holds one answer, a future: the first answer wins, later ones return False and send
nothing. Clicking a button of a card's view calls the same methods as code does.

A :class:`CardDesk` holds the cards of ONE session (one process): the pending ones, and
those not handed out yet by ``agent.next_permission()`` / ``next_question()``. A
restart makes a new desk, so a card of a dead process is never handed out again. The
desk asks the agent's policies first (rule plugins, then the Escouade mode), then the
user; cards are never read by a hidden task, so a cancelled wait swallows nothing.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from ..core import forms, plans
from ..core.conversation import Conversation, Item, Permission, Question, Subagent, ToolCall
from ..core.render_text import answer_label, render_item

if TYPE_CHECKING:
    from ..wire.session import AgentSession
    from .interfaces import CardsAgent
    from .interfaces import KernelRequests

log = logging.getLogger(__name__)

Policy = Callable[["PermissionCard"], Awaitable[None]]
"""A permission policy: given a fresh card, it may settle it (``card.choose(option,
by=..., message=...)``; a refusal with ``card.deny(by=..., message=...)``, which reaches
the agent even when it offered no reject option) or leave it pending. Policies run in order, before the user is
called; rule plugins (the broker) and the agent's Escouade mode are policies. A policy
must return promptly (the broker bounds plugins to 500 ms)."""

Kind = Literal["permission", "question"]


class _Card:
    """What the agent waits on: one answer (a future), the first one wins."""

    def __init__(self, agent: Any, desk: CardDesk, item: Item) -> None:
        self.agent = agent  # the Agent the user holds (rule plugins read its name, folder, project, harness)
        self._desk = desk
        self._item = item
        self._future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._on_answer: list[Callable[[], object]] = []  # called once it is answered (on_answer)

    @property
    def answered(self) -> bool:
        return self._future.done()

    async def wait(self) -> dict[str, Any]:
        """The answer sent to the agent (a wire dict)."""
        return await asyncio.shield(self._future)

    def on_answer(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` as soon as the card is answered, whoever answers (a budget card's
        follow-up; at once when it already is)."""
        if self._future.done():
            fn()
        else:
            self._on_answer.append(fn)

    def __repr__(self) -> str:
        return render_item(self._item)


class PermissionCard(_Card):
    """A permission request of the agent, waiting for an answer.

    ``choose(option)`` answers it — ``option`` is one of the agent's ``optionId``s, or an
    option kind (``allow_once``, ``allow_always``, ``reject_once``, ``reject_always``),
    which picks the first option of that kind. The first answer wins; later ones return
    False and send nothing. Clicking a button on the card's view calls the same method.
    ``deny(by, message)`` refuses whatever the agent offered (``reject_once``, else
    ``cancelled``); ``label`` says what the answer was (see ``render_text.answer_label``).
    ``subagent``: the child session (ACP subagent) that asks, else None; its card is an
    item of the subagent's nested conversation, and ``agent_name`` is "parent › child".
    """

    def __init__(self, agent: Any, desk: CardDesk, permission: Permission,
                 subagent: Subagent | None = None) -> None:
        super().__init__(agent, desk, permission)
        self.permission = permission
        self.subagent = subagent

    @property
    def conversation(self) -> Conversation:
        """The conversation the card is in: the subagent's, else the agent's."""
        return self.subagent.conversation if self.subagent is not None else self.agent.conversation

    @property
    def agent_name(self) -> str:
        """Who asks: the agent's name, or "parent › child" for a subagent's request."""
        name = self.agent.name or "agent"
        return f"{name} › {self.subagent.name}" if self.subagent is not None else name

    @property
    def options(self) -> list[dict[str, Any]]:
        return self.permission.options

    @property
    def tool_call(self) -> ToolCall | None:
        """The live tool call (the agent's updates change it)."""
        return self.permission.tool_call

    @property
    def request(self) -> ToolCall | None:
        """What the card asks, frozen when it was made (:attr:`Permission.request`): what
        the policies decide on and the views show."""
        return self.permission.request

    @property
    def origin(self) -> str | None:
        """The part of escouade_nb whose card this is (``"budget"``, ``"worktree"``,
        ``"kernel"``), known from the code that made it; None: the agent's request."""
        call = self.permission.tool_call
        return call.origin if call is not None else None

    @property
    def state(self) -> str:
        return self.permission.state

    @property
    def label(self) -> str:
        return answer_label(self.permission)

    @property
    def plan(self) -> str | None:
        """The plan's markdown when this card is a plan to approve, else None."""
        return self.permission.plan

    def option(self, option: str) -> dict[str, Any]:
        """The agent's option for an ``optionId`` or a kind; ``ValueError`` if none."""
        for o in self.options:
            if o.get("optionId") == option:
                return o
        for o in self.options:
            if o.get("kind") == option:
                return o
        offered = ", ".join(f"{o.get('optionId')} ({o.get('kind')})" for o in self.options)
        raise ValueError(f"no option {option!r} on this card; the agent offered: {offered}")

    def first_of(self, *kinds: str) -> str:
        """The ``optionId`` of the first option of the first of ``kinds`` offered;
        ``ValueError`` when the agent offered none of them."""
        for kind in kinds:
            for o in self.options:
                if o.get("kind") == kind:
                    return o["optionId"]
        raise ValueError(f"the agent offered no {' or '.join(kinds)} option: {self.options}")

    def choose(self, option: str, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        """Answer with ``option``; returns False if the card was already answered.
        ``by`` and ``message`` are what the card says ("Denied by Team rules via
        Escouade — no rm -rf here"); the agent is told ``reply`` (else ``message``) in the
        answer's ``_meta.escouade.message`` — ACP's permission answer has no field for it."""
        chosen = self.option(option)
        return self._answer("selected", chosen["optionId"], by, message, reply)

    def deny(self, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        """Refuse, in the one way that always reaches the agent: its ``reject_once``
        option, or — when it offered none — the ``cancelled`` outcome (never widened to
        ``reject_always``). The card says "Denied by ``by`` — ``message``"; the agent is
        told ``reply`` (else ``message``) in ``_meta.escouade.message``, with
        ``_meta.escouade.denied`` true. Returns False if the card was already answered."""
        once = next((o for o in self.options if o.get("kind") == "reject_once"), None)
        if once is not None:
            return self._answer("selected", once["optionId"], by, message, reply, denied=True)
        return self._answer("cancelled", None, by, message, reply, denied=True)

    def _answer(self, outcome: Literal["selected", "cancelled"], option_id: str | None, by: str,
                message: str | None, reply: str | None, denied: bool = False) -> bool:
        if self._future.done():
            return False
        self.conversation.resolve_permission(self.permission, outcome, option_id, by, message, denied=denied)
        told = reply or message
        meta = {"by": by, **({"denied": True} if denied else {}), **({"message": told} if told else {})}
        self._future.set_result({"outcome": outcome, **({"optionId": option_id} if option_id else {}),
                                 "_meta": {"escouade": meta}})
        self._desk.settled(self)
        return True

    def approve(self) -> bool:
        """Approve the plan: answer with the agent's allow option (once)."""
        return self.choose(self.first_of("allow_once", "allow_always"))

    def keep_planning(self, feedback: str = "") -> bool:
        """Send the plan back: answer with the agent's reject option. ``feedback``
        reaches the model verbatim — as the refusal message (``_meta.escouade.message``
        on the answer) when the agent says it reads it
        (``agentCapabilities._meta.escouade.refusalMessage``), else as the next prompt."""
        done = self.choose(self.first_of("reject_once", "reject_always"), message=feedback or None)
        if done and feedback and not self.agent.reads_refusal_messages:
            self._desk.agent.send(feedback)
        return done

    def cancel(self, why: str | None = None) -> bool:
        """Answer ``cancelled`` (the turn was stopped); False if already answered."""
        if self._future.done():
            return False
        self.conversation.resolve_permission(self.permission, "cancelled", None, why)
        self._future.set_result({"outcome": "cancelled"})
        self._desk.settled(self)
        return True


class QuestionCard(_Card):
    """A question of the agent (ACP ``elicitation/create``, or questions written in
    text). ``accept(content)`` answers with the form's values (a dict matching the
    requested schema; for text questions, answers by question id), ``decline()`` and
    ``cancel()`` refuse. The first answer wins; later ones return False."""

    def __init__(self, agent: Any, desk: CardDesk, question: Question) -> None:
        super().__init__(agent, desk, question)
        self.question = question

    @property
    def state(self) -> str:
        return self.question.state

    @property
    def fields(self) -> dict[str, Any]:
        """The requested schema's properties (form mode), by field name."""
        return dict((self.question.schema or {}).get("properties") or {})

    def accept(self, content: dict[str, Any] | None = None, by: str = "you") -> bool:
        """Answer with ``content`` (field name -> value; leave out what was not given).
        A form's answer is validated against its requested schema with ``jsonschema``:
        ``ValueError`` naming the field for a required field missing, a wrong type
        (``integer`` vs ``number``, a string for a number…), a value outside an ``enum``, a
        bad ``format``; nothing is sent then. Returns False if already answered."""
        content = dict(content or {})
        if self.question.mode == "form" and not self._future.done():
            forms.check(self.question.schema, content)
        return self._settle("accept", content)

    def decline(self) -> bool:
        return self._settle("decline", None)

    def cancel(self) -> bool:
        return self._settle("cancel", None)

    def _settle(self, action: str, content: dict[str, Any] | None) -> bool:
        if self._future.done():
            return False
        self.agent.conversation.resolve_question(self.question, action, content)
        self._future.set_result({"action": action, **({"content": content} if content is not None else {})})
        self._desk.settled(self)
        return True


class CardDesk:
    """The cards of one session of ``agent``. ``cards`` and ``questions`` are the pending
    ones (oldest first). ``closed``: the session is over, a card that still arrives is
    answered ``cancelled`` at once."""

    def __init__(self, agent: CardsAgent) -> None:
        self.agent = agent
        self.session: AgentSession | None = None
        self.kernel: KernelRequests | None = None  # what the session has of the kernel's MCP server
        self.cards: list[PermissionCard] = []
        self.questions: list[QuestionCard] = []
        self._unhanded: dict[Kind, collections.deque[_Card]] = {
            "permission": collections.deque(), "question": collections.deque()}
        self.closed = False
        self.asked: set[str] = set()  # tool call ids that had a permission card
        self.grants: list[tuple[str, str, str, str]] = []  # (tool, option name, who, card title) of "always" answers
        self._forms_loading: asyncio.Future[None] | None = None  # jsonschema imported in a thread (forms.load)

    # -- handing out ------------------------------------------------------------------------
    def take(self, kind: Kind) -> _Card | None:
        """The oldest card of ``kind`` not handed out yet (None if none); it is handed out."""
        queue = self._unhanded[kind]
        return queue.popleft() if queue else None

    # -- arrivals ------------------------------------------------------------------------------
    async def on_permission(self, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> dict[str, Any]:
        """``session/request_permission``: a card; the policies, then the user, answer it.

        The agent's own request to run code through the kernel's MCP server is folded
        with the server's call only when it provably asks for it — named as our server's
        ``run_code`` on a whole field and stating arguments that fit the tool's schema
        (:meth:`.KernelAccess.identify`): its card then shows that code, whole, and an
        allowance lets exactly that code run once when the server receives it (no second
        card). Anything else — a title that merely names a kernel tool, arguments that do
        not fit — is a normal request."""
        kernel = self.kernel
        if kernel is not None and not self.closed:
            probe = ToolCall("", tool_call_id=str(tool_call.get("toolCallId", "")), title=tool_call.get("title"),
                             kind=tool_call.get("kind"), raw_input=tool_call.get("rawInput"),
                             meta=tool_call.get("_meta"), content=list(tool_call.get("content") or []))
            known = self.agent.conversation.tool_calls.get(probe.tool_call_id)
            found = kernel.identify(probe, known)
            if found is not None and found[0] == "run_code":
                return await kernel.agent_asks_run_code(tool_call, options, found[1]["code"])
            if found is not None and found[0] == "execute_cell":
                return await kernel.agent_asks_execute_cell(tool_call, options, found[1]["cell_id"])
        card = self.new_card(tool_call, options)
        return await self.decide(card)

    async def on_child_permission(self, session_id: str, tool_call: dict[str, Any],
                                  options: list[dict[str, Any]]) -> dict[str, Any]:
        """``session/request_permission`` of a child session (a subagent): a card in the
        subagent's nested conversation, naming it; policies and the user answer it as any."""
        sub = self.agent.conversation.subagents.get(session_id)
        if sub is None:  # the router let it through, so it was announced: cannot happen
            return {"outcome": "cancelled"}
        return await self.decide(self.new_card(tool_call, options, subagent=sub))

    def new_card(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                 mcp: tuple[str, str] | None = None, subagent: Subagent | None = None,
                 request: ToolCall | None = None, origin: str | None = None) -> PermissionCard:
        """A pending permission card for ``tool_call`` (a ``ToolCallUpdate`` wire dict) with
        ``options`` (``{optionId, name, kind}``); ``mcp`` notes the MCP tool it is;
        ``subagent``: the child session that asks (the card goes in its conversation);
        ``request``: what the card asks when the client states it (a kernel tool's card:
        the arguments its server received), else the call as it stands, frozen;
        ``origin``: the part of escouade_nb that makes this card its own (``"budget"``,
        ``"worktree"``, ``"kernel"``: :attr:`ToolCall.origin`), None for the agent's
        request — whatever its tool call id, title or kind say."""
        agent = self.agent
        conversation = subagent.conversation if subagent is not None else agent.conversation
        perm = conversation.add_permission(tool_call, options, request=request, origin=origin)
        call, asked = perm.tool_call, perm.request
        if call is not None:
            if origin is None:  # the agent's ids only: one of ours never stands for an agent's call
                self.asked.add(call.tool_call_id)
            if mcp is not None:
                call.mcp = mcp
            elif self.kernel is not None and request is None:
                self.kernel.recognise(call)
            if asked is not None and request is None:  # the client's notes, made on the live call
                asked.mcp, asked.kernel_notebook = call.mcp, call.kernel_notebook
        perm.plan = plans.plan_of(asked, agent.harness.acp.tools)
        card = PermissionCard(agent, self, perm, subagent=subagent)
        self.cards.append(card)
        self._arrived("permission", card)
        return card

    async def decide(self, card: PermissionCard) -> dict[str, Any]:
        """The answer of ``card``: the policies first (rule plugins, the kernel's reads,
        the mode), else the user; a card of a closed session is cancelled at once."""
        agent, perm = self.agent, card.permission
        tcid = perm.tool_call.tool_call_id if perm.tool_call is not None and perm.tool_call.origin is None else ""
        if not card.answered:  # a budget card waits: nothing is granted meanwhile
            await agent.budget.hold_permission()
        policies = agent.active_policies()
        if card.answered:
            pass  # settled on arrival (a grant of this session)
        elif self.closed or (self.session is not None and self.session.closing):
            card.cancel("agent closed")
        elif self.session is not None and tcid and self.session.router.take_withdrawn(tcid):
            card.cancel("the agent withdrew it")
        elif perm.plan is None and policies:
            card.conversation.set_deciding(perm, True)
            await self._consult(card, policies)  # in this request's own task: it ends with it
        else:
            agent.cards_waiting()
        return await card.wait()

    async def _consult(self, card: PermissionCard, policies: list[Policy]) -> None:
        """Ask each policy in turn; the first that settles the card wins. The user may
        answer meanwhile. If none settles it, the user is called (``waiting``)."""
        for policy in policies:
            if card.state != "pending":
                return
            try:
                await policy(card)
            except Exception:
                log.exception("permission policy %r failed; the user decides", policy)
        if card.state == "pending":
            card.conversation.set_deciding(card.permission, False)
            self.agent.cards_waiting()

    async def on_elicitation(self, message: str, mode: dict[str, Any]) -> dict[str, Any]:
        """``elicitation/create``: a form (``requestedSchema``) or a URL to visit."""
        url = mode.get("url")
        if not url and self._forms_loading is None:  # jsonschema's import (~0.7 s) off the loop, once
            self._forms_loading = asyncio.get_running_loop().run_in_executor(None, forms.load)
        question = Question("", message=message, mode="url" if url else "form",
                            schema=mode.get("requestedSchema"), url=str(url) if url else None,
                            tool_call_id=mode.get("toolCallId"), elicitation_id=mode.get("elicitationId"))
        return await self.add_question(question).wait()

    def on_elicitation_complete(self, elicitation_id: str) -> None:
        """The agent says a URL elicitation is done: its card is settled as accepted."""
        for card in list(self.questions):
            if card.question.elicitation_id == elicitation_id:
                card.accept({})

    def add_question(self, question: Question) -> QuestionCard:
        self.agent.conversation.add_question(question)
        card = QuestionCard(self.agent, self, question)
        self.questions.append(card)
        self._arrived("question", card)
        if self.closed:
            card.cancel()
        else:
            self.agent.cards_waiting()
        return card

    def withdrawn(self, tool_call_id: str) -> bool:
        """The agent withdrew the permission request of ``tool_call_id``
        (``$/cancel_request``): its card is answered ``cancelled``. False if no card yet."""
        for card in self.cards:  # the agent's requests only: it cannot withdraw one of our cards by naming its id
            call = card.tool_call
            if call is not None and call.origin is None and call.tool_call_id == tool_call_id:
                card.cancel("the agent withdrew it")
                return True
        return False

    def _arrived(self, kind: Kind, card: _Card) -> None:
        self._unhanded[kind].append(card)
        self.agent.wake_waiters()

    # -- answers -------------------------------------------------------------------------------
    def settled(self, card: _Card) -> None:
        for fn in card._on_answer:
            fn()
        if isinstance(card, PermissionCard) and card in self.cards:
            self.cards.remove(card)
            chosen = card.permission.chosen or {}
            asked = card.request or card.tool_call
            if chosen.get("kind") == "allow_always" and asked is not None:
                self.grants.append((self._tool_of(asked), chosen.get("name") or "allow always",
                                    card.permission.answered_by or "you", asked.title or ""))
        elif isinstance(card, QuestionCard) and card in self.questions:
            self.questions.remove(card)
            if card.question.mode == "text" and card.question.state == "accept":
                self.agent.send(plans.answers_prompt(card.question.questions, card.question.answer or {}))
        if not self.cards and not self.questions:
            self.agent.cards_answered()

    def _tool_of(self, call: ToolCall) -> str:
        from ..permissions.request import normalise

        return normalise(call, self.agent.harness.acp.tools).tool

    def note_unasked(self, call: ToolCall) -> None:
        """A tool call that ended without a card of its own, of a tool an earlier card of
        this session was answered "always" for: the call says so (``not_asked``). None of
        the released agents says why it stopped asking (measured on the seven): this is
        what the client knows, no more."""
        if (not self.grants or call.not_asked is not None or call.tool_call_id in self.asked
                or call.status not in ("completed", "failed")):
            return
        tool = self._tool_of(call)
        for granted, option, who, title in self.grants:
            if granted == tool:
                call.not_asked = (f"not asked: earlier in this session {who} chose \u201c{option}\u201d"
                                  + (f" on \u201c{title}\u201d" if title else ""))
                self.agent.conversation.touch(call)
                return

    def cancel_pending(self, why: str, *, text_questions: bool = True) -> None:
        """Answer every pending card ``cancelled`` (ACP requires it when a turn is
        cancelled); questions written in text stay unless ``text_questions``."""
        for card in list(self.cards):
            card.cancel(why)
        for question in list(self.questions):
            if text_questions or question.question.mode != "text":
                question.cancel()

    def close(self, why: str) -> None:
        """The session is over: every pending card answered, later ones too."""
        self.closed = True
        self.cancel_pending(why)
