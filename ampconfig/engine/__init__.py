"""The engine: one rewrite of the user's model, from the options to the result, on either kind of input source.

It sits above the runner (the rare input the ONNX checker rejects is judged by ONNX Runtime, and large weights are
converted by its Cast kernel) and below every caller: the API (``ampconfig.api``), the onnx-ir pass
(``ampconfig.ir_pass``), and the commands (through ``prove``, ``lock`` and ``cli``). The safety net
(:mod:`ampconfig.engine.safety_net`: the nodes whose low dtype makes ONNX Runtime crash or refuse keep theirs) and the
load check every written model passes (:mod:`ampconfig.engine.load_check`) are here, below every caller that writes.
"""
