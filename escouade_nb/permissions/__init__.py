"""Rule plugins decide permissions: the request they get, the verdict merge, the plugin
host, the broker (a permission policy of every agent), the journal, the user's states.

See ``broker.py`` for the rules, ``request.py`` for the request's shape, ``journal.py``
for where the journal is kept, ``states.py`` for where on/off is kept.
"""

from .broker import BUDGET, FIRST_BUDGET, Broker, Decision, RulePlugins, agent_message, card_by
from .host import PluginHost, PluginProcess, PluginSpec, find_rule_plugins
from .journal import Entry, Journal, journal_dir
from .request import DecideParams, Normalised, normalise
from .states import PluginStates, config_dir
from .verdict import Answer, Tally, Verdict, merge

__all__ = ["BUDGET", "FIRST_BUDGET", "Broker", "Decision", "RulePlugins", "agent_message", "card_by",
           "PluginHost", "PluginProcess", "PluginSpec", "find_rule_plugins", "Entry", "Journal", "journal_dir",
           "DecideParams", "Normalised", "normalise", "PluginStates", "config_dir", "Answer", "Tally", "Verdict",
           "merge"]
