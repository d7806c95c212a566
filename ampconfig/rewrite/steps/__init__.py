"""The rewrite's steps, each an onnx-ir in-place pass over the ``ir.Model`` with what it requires and ensures:
admit and raise the opset for bfloat16 (once, sharing an :class:`~ampconfig.rewrite.steps.state.InputAdmission`),
then name, fold, type, decide, apply, check (per attempt, sharing one
:class:`~ampconfig.rewrite.steps.state.RewriteRun`: what the options and the admission gave, and what each step
found). :mod:`ampconfig.rewrite.pipeline` runs them in PassManagers."""
