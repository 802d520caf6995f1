"""``escouade_nb.wire.router.Router``: the incoming-message policy, on raw JSON-RPC dicts."""

from escouade_nb.wire.router import Router


def upd(text: str, session: str | None = "s1") -> dict:
    params = {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}
    if session is not None:
        params["sessionId"] = session
    return {"jsonrpc": "2.0", "method": "session/update", "params": params}


def make(withdrawn_result: bool = True):
    folded, refused, withdrawn = [], [], []
    router = Router(fold=lambda u: folded.append(u["content"]["text"]), refuse=lambda i, e: refused.append((i, e)),
                    withdrawn=lambda t: withdrawn.append(t) or withdrawn_result)
    return router, folded, refused, withdrawn


def test_updates_before_the_session_answer_are_kept_then_folded_in_order():
    router, folded, _, _ = make()
    for text in ("a", "b", "c"):
        assert router.intercept(upd(text)) is True
    assert folded == []
    router.intercept(upd("elsewhere", session="s9"))
    router.opened("s1")
    assert folded == ["a", "b", "c"] and router.dropped == 1
    router.intercept(upd("d", session=None))  # no sessionId: ours
    router.intercept(upd("e", session="s2"))  # another session's: dropped
    assert folded == ["a", "b", "c", "d"] and router.dropped == 2


def test_a_load_replay_is_flushed_before_the_session_is_opened():
    router, folded, _, _ = make()
    router.intercept(upd("replayed"))
    router.flush_early("s1")
    assert folded == ["replayed"] and router.session_id is None


def test_requests_for_another_session_are_refused_with_invalid_params():
    router, _, refused, _ = make()
    router.opened("s1")
    message = {"jsonrpc": "2.0", "id": 7, "method": "fs/read_text_file", "params": {"sessionId": "other", "path": "x"}}
    assert router.intercept(message) is True
    (rpc_id, error), = refused
    assert rpc_id == 7 and error["code"] == -32602 and "unknown session 'other'" in error["data"]["reason"]
    ours = {"jsonrpc": "2.0", "id": 8, "method": "fs/read_text_file", "params": {"sessionId": "s1", "path": "x"}}
    assert router.intercept(ours) is False  # goes on to the SDK
    answer = {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert router.intercept(answer) is False


def test_cancel_request_closes_the_card_of_that_permission_request():
    router, _, _, withdrawn = make()
    router.opened("s1")
    ask = {"jsonrpc": "2.0", "id": 11, "method": "session/request_permission",
           "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t1"}, "options": []}}
    assert router.intercept(ask) is False
    assert router.intercept({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 11}}) is True
    assert withdrawn == ["t1"] and not router.take_withdrawn("t1")  # the card was closed: nothing remembered
    assert router.intercept({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 99}}) is True
    assert withdrawn == ["t1"]  # not a permission request of ours: nothing to close


def test_a_withdrawal_before_its_card_exists_is_remembered_once():
    router, _, _, withdrawn = make(withdrawn_result=False)
    router.opened("s1")
    router.intercept({"jsonrpc": "2.0", "id": 5, "method": "session/request_permission",
                      "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t5"}}})
    router.intercept({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 5}})
    assert withdrawn == ["t5"]
    assert router.take_withdrawn("t5") is True and router.take_withdrawn("t5") is False


def test_odd_messages_do_not_break_it():
    folded, refused = [], []
    router = Router(fold=folded.append, refuse=lambda i, e: refused.append(i), withdrawn=lambda t: False)
    for odd in ({}, {"method": 3}, {"method": "session/update"}, {"method": "session/update", "params": []},
                {"id": 1, "method": "x", "params": "no"}):
        router.intercept(odd)
    router.opened("s1")
    assert refused == [] and folded == [None, None]  # kept for the fold, which shows them as unknown
