"""Deciding every node's dtype: node facts, the mode policies and painting passes, the plan. Pure data.

What a decision is asked (:class:`~ampconfig.decide.rewrite_options.RewriteOptions`: the mode, the lists, the
judges; :class:`~ampconfig.decide.measured_facts.MeasuredFacts`: the value ranges and what else was measured; the
low types' limits) lives here too, beside the passes that read it; the settings above build the choices from the
command line and the session config."""
