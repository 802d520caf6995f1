"""How an agent's program is found, wrapped and updated (a wing of the engine):
:mod:`.launcher` (its command line through ``--via`` and its environment), :mod:`.sandbox`
(bubblewrap), :mod:`.ssh_forward` (the kernel's server over ``ssh``), :mod:`.versions`
(its ``--version`` against the manifest's tested range), :mod:`.harness_update` (the
manifest's update command), :mod:`.sign_in` (a terminal sign-in).

The wing never sees the agent's handle: each part is given what it needs, typed by the
small Protocols of :mod:`.interfaces`. It imports no other module of the engine.
"""
