"""Review and rewind (a wing of the engine): :mod:`.cell_review` (an agent's change of a
notebook cell, pending the user's Keep or Reject), :mod:`.file_review` (the files it
changed in a turn, ``review=True``), :mod:`.checkpoints` (its folder before each turn, and
the rewind). It imports of the engine only :mod:`..interfaces` and :mod:`..kernel_git`.
"""
