"""Console programs: the scripted ``fake`` agent (``escouade-fake-agent``) and the rule
plugin bench (``escouade-plugin``)."""
