"""Rule plugins decide permissions: the request they get, the verdict merge, the plugin
host, the broker (a permission policy of every agent), the journal, the user's states.

See ``broker.py`` for the rules, ``request.py`` for the request's translation,
``protocol.py`` for the plugin wire (shared with ``plugin_sdk``), ``jsonrpc.py`` for the
client the host speaks it with, ``interfaces.py`` for what the broker needs of a card,
``journal.py`` for where the journal is kept, ``states.py`` for where on/off is kept.
Names are loaded on first use (PEP 562): ``plugin_sdk`` imports :mod:`.protocol` alone,
without the host.
"""

from __future__ import annotations

from .._lazy import lazy_names

_LAZY = {
    "BUDGET": "broker", "FIRST_BUDGET": "broker", "Broker": "broker", "Decision": "broker", "RulePlugins": "broker",
    "agent_message": "broker", "card_by": "broker", "PluginHost": "host", "PluginProcess": "host",
    "PluginSpec": "host", "find_rule_plugins": "host", "Entry": "journal", "Journal": "journal",
    "journal_dir": "journal", "DecideParams": "request", "Normalised": "request", "normalise": "request",
    "PluginStates": "states", "config_dir": "states", "Answer": "verdict", "Tally": "verdict", "Verdict": "verdict",
    "merge": "verdict", "PROTOCOL_VERSION": "protocol", "DecideResult": "protocol", "LineClient": "jsonrpc",
    "PermissionRequest": "interfaces", "PermissionAgent": "interfaces", "plugin_environment": "host",
    "JournalQuery": "commands",
}
__all__ = list(_LAZY)


__getattr__ = lazy_names(__name__, _LAZY, globals())
