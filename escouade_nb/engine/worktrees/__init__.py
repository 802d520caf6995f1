"""An agent's git worktree (a wing of the engine): :mod:`.worktree` (the git operations:
add, merge, rebase, discard), :mod:`.agent_worktrees` (what they mean for an agent: the
notices, the journal), :mod:`.worktree_setup` (the project's setup and cleanup commands).
It imports of the engine only :mod:`..interfaces`, :mod:`..cards`, :mod:`..kernel_git`
and the :mod:`..launch` wing.
"""
