"""The decision passes, one per file. Each reads and writes a
:class:`~ampconfig.decide.decision_state.DecisionState` for one scope, states what it requires and ensures, and
checks that around its work (see :mod:`.base`)."""
