"""Deciding every node's dtype: node facts, the mode policies and painting passes, the plan. Pure data.

What a decision is asked (:class:`~ampconfig.decide.rewrite_options.RewriteOptions`: the mode, the lists, the
judges, the value ranges and the low types' limits) lives here too, beside the passes that read it; the settings
above build it from the command line and the session config."""
