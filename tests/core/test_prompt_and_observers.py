"""The pure pieces of core/: prompt blocks and the promptCapabilities gate, observers."""

import base64
import gc
import weakref
from pathlib import Path

from escouade_nb.core.observers import Observers
from escouade_nb.core.prompt import attachment_block, blocks, gate


def test_blocks_from_text_dicts_and_models():
    from acp.schema import TextContentBlock

    assert blocks("hi") == [{"type": "text", "text": "hi"}]
    out = blocks(["a", {"type": "resource_link", "uri": "file:///x", "name": "x"}, TextContentBlock(type="text", text="m")])
    assert out == [{"type": "text", "text": "a"}, {"type": "resource_link", "uri": "file:///x", "name": "x"},
                   {"type": "text", "text": "m"}]


def test_attachment_blocks_by_content():
    png = Path("/tmp/x/plot.png")
    assert attachment_block(png, b"\x89PNG") == {"type": "image", "mimeType": "image/png",
                                                   "data": base64.b64encode(b"\x89PNG").decode()}
    csv = attachment_block(Path("/tmp/x/data.csv"), "a,b\né,2\n".encode())
    assert csv["type"] == "resource" and csv["resource"]["text"] == "a,b\né,2\n"
    assert csv["resource"]["uri"] == "file:///tmp/x/data.csv"
    binary = attachment_block(Path("/tmp/x/blob.bin"), b"\xff\xfe\x00")
    assert binary["type"] == "resource_link" and binary["name"] == "blob.bin"
    assert attachment_block(Path("/tmp/x/big.txt"), None)["type"] == "resource_link"  # too big to read


def test_the_gate_keeps_what_the_agent_takes():
    prompt = [{"type": "text", "text": "t"}, {"type": "image", "mimeType": "image/png", "data": ""},
              {"type": "resource", "resource": {"uri": "file:///tmp/a%20b.txt", "mimeType": "text/plain", "text": "x"}}]
    sent, notices = gate(prompt, {}, who="fake")
    assert sent == [{"type": "text", "text": "t"},
                    {"type": "resource_link", "uri": "file:///tmp/a%20b.txt", "name": "a b.txt", "mimeType": "text/plain"}]
    assert notices == ["The image was not sent: fake does not accept images (promptCapabilities.image is false)."]
    sent, notices = gate(prompt, {"image": True, "embeddedContext": True})
    assert sent == prompt and notices == []


def test_observers_tokens_and_one_error_policy(caplog):
    obs: Observers = Observers("test")
    got = []
    first = obs.subscribe(lambda x: got.append(("a", x)))
    obs.subscribe(lambda x: 1 / 0)
    third = obs.subscribe(lambda x: got.append(("c", x)))
    obs.emit(1)
    assert got == [("a", 1), ("c", 1)] and "test: a subscriber failed" in caplog.text and len(obs) == 3
    first()
    first.close()  # twice is fine
    assert not first.active and len(obs) == 2
    obs.emit(2)
    assert got[-1] == ("c", 2) and ("a", 2) not in got
    # a subscriber that unsubscribes another during an emit: the other is not called
    obs2: Observers = Observers("test2")
    calls = []
    later = None
    obs2.subscribe(lambda: later.close())
    later = obs2.subscribe(lambda: calls.append("later"))
    obs2.emit()
    assert calls == [] and len(obs2) == 1
    third()


def test_emit_hot_calls_only_the_hot_subscribers_in_order(caplog):
    obs: Observers = Observers("hot")
    got = []
    a = obs.subscribe(lambda x: got.append(("a", x)))
    obs.subscribe(lambda x: got.append(("cold", x)), hot=False)
    obs.subscribe(lambda x: 1 / 0)
    c = obs.subscribe(lambda x: got.append(("c", x)))
    obs.emit(1)
    obs.emit_hot(2)
    assert got == [("a", 1), ("cold", 1), ("c", 1), ("a", 2), ("c", 2)] and "hot: a subscriber failed" in caplog.text
    a()
    got.clear()
    obs.emit_hot(3)
    obs.emit(4)
    assert got == [("c", 3), ("cold", 4), ("c", 4)] and len(obs) == 3
    # a hot subscriber that unsubscribes another during emit_hot: the other is not called
    obs.subscribe(lambda x: c.close())
    later = obs.subscribe(lambda x: got.append(("later", x)))
    got.clear()
    obs.emit_hot(5)
    assert got == [("c", 5), ("later", 5)] and not c.active
    later()
    got.clear()
    obs.emit_hot(6)
    assert got == []


def test_a_closed_token_lets_go_of_its_callback():
    class View:
        def on(self, x):
            pass

    obs: Observers = Observers()
    view = View()
    sub = obs.subscribe(view.on)
    ref = weakref.ref(view)
    sub.close()
    del view
    gc.collect()
    assert ref() is None and len(obs) == 0
