"""The engine: :class:`~.agent.Agent` (a façade over one session object per process, its
cards, turns, controls, workspace and resume), the :class:`~.squad.Squad`, harness
updates. It needs no Jupyter: it runs in ``asyncio.run`` too."""
