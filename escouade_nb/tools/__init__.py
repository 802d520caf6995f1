"""Console programs: the scripted ``fake`` agent (``escouade-fake-agent``: ``fake_agent``,
its parts in ``fake_words``, ``fake_session``, ``fake_files``, ``fake_modes``,
``fake_mcp``) and the rule plugin bench (``escouade-plugin``)."""
