"""Reading what the views show, as the browser would: the buttons in a card's HTML."""

from __future__ import annotations


def buttons_of(html: str) -> list[dict]:
    """The buttons a card's HTML shows: ``{"act", "key", "value", "label"}`` each."""
    import html as html_lib  # (the parameter is the text)
    import re

    out = []
    for attrs, label in re.findall(r"<button([^>]*)>(.*?)</button>", html, re.S):
        found = dict(re.findall(r'data-(act|key|value)="([^"]*)"', attrs))
        out.append({"act": found.get("act"), "key": html_lib.unescape(found.get("key", "")),
                    "value": html_lib.unescape(found["value"]) if "value" in found else None,
                    "label": html_lib.unescape(re.sub(r"<[^>]+>", "", label))})
    return out


def record(view) -> list[dict]:
    """Every message ``view`` sends its front-end from now on, decoded (a deflated one
    inflated): anywidget's ``send`` wrapped, what went out unchanged."""
    import json
    import zlib

    messages: list[dict] = []
    original = view.send

    def send(content, buffers=None):
        if isinstance(content, dict) and content.get("z") and buffers:
            messages.append(json.loads(zlib.decompress(bytes(buffers[0])).decode("utf-8")))
        else:
            messages.append(content)
        return original(content, buffers)
    view.send = send
    return messages


def html_shown(view, messages: list[dict] = ()) -> list[str]:
    """Every piece of HTML the browser puts in the page for ``view``: its items now (a
    snapshot) and what ``messages`` (see :func:`record`) carried — whole items, frozen
    blocks of a streaming reply, the squad's pending card."""
    out = [html for _key, html, _meta in view.state().get("items", ())]
    pending = view.state().get("pending") if "rows" in view.state() else None
    if pending:
        out.append(pending["html"])
    for message in messages:
        if message.get("k") == "snap":
            out.extend(html for _key, html, _meta in message["state"].get("items", ()))
        for op in message.get("ops", ()):
            if op[0] in ("it", "fz"):
                out.append(op[2])
            elif op[0] == "sq" and op[1].get("pending"):
                out.append(op[1]["pending"]["html"])
    return out


def form_fields(html: str, typed: dict | None = None) -> tuple[dict, list[str]]:
    """What the front-end's Submit collects from a card's form (``collectFields`` in
    ``widgets/escouade.js``), the user having typed or chosen ``typed`` (field name ->
    text, or the index of a choice as a string, or a list of them): ``(fields, missing)``.
    A field counts when touched or showing a value that counts as given
    (``data-default``); ``missing`` names the required ones (their labels) left empty."""
    from html.parser import HTMLParser

    typed = dict(typed or {})

    class Form(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.fields: list[dict] = []
            self.label: list[str] | None = None
            self.select: dict | None = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "label":
                self.label = []
            elif tag in ("input", "textarea", "select") and "data-field" in a:
                field = {"tag": tag, "name": a["data-field"], "required": a.get("data-required") == "1",
                         "default": a.get("data-default") == "1", "multiple": "multiple" in a,
                         "value": a.get("value", ""), "selected": [],
                         "label": "".join(self.label or []).strip()}
                self.fields.append(field)
                if tag == "select":
                    self.select = field
            elif tag == "option" and self.select is not None and "selected" in a:
                self.select["selected"].append(a.get("value", ""))

        def handle_endtag(self, tag):
            if tag == "select":
                self.select = None
            elif tag == "label":
                self.label = None

        def handle_data(self, data):
            if self.label is not None and self.select is None:
                self.label.append(data)

    form = Form()
    form.feed(html)
    out: dict = {}
    missing: list[str] = []
    for f in form.fields:
        name = f["name"]
        touched = name in typed
        if f["tag"] == "select" and f["multiple"]:
            value = list(typed[name]) if touched else f["selected"]
        elif f["tag"] == "select":
            value = typed[name] if touched else (f["selected"][0] if f["selected"] else "")
        else:
            value = typed[name] if touched else f["value"]
        given = touched or f["default"] or f["tag"] == "textarea"
        empty = value == "" or value == []
        if f["required"] and (empty or not given):
            label = f["label"]
            missing.append(label[:-2] if label.endswith(" *") else label)
        if given and not empty:
            out[name] = value
    return out, missing
