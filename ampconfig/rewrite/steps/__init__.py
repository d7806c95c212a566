"""The rewrite's steps, each an onnx-ir in-place pass over the ``ir.Model`` with what it requires and ensures:
name, fold, type, decide, apply, check (:mod:`ampconfig.rewrite.pipeline` runs them in a PassManager). They share
one :class:`~ampconfig.rewrite.steps.state.RewriteRun`: what the options and the admission gave, and what each
step found."""
