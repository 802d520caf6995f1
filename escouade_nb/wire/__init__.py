"""The wire: one agent process and its ACP session (framing, transport, routing of
incoming messages, client handlers for fs, terminals and elicitation), and transcripts.
This ``__init__`` imports nothing, so :mod:`.framing` can be used alone (``plugin_sdk``)."""
