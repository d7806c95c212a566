"""The rewrite's steps, each an onnx-ir in-place pass over the ``ir.Model`` that states what it requires and what it
ensures about the model or the plan it reads (:mod:`ampconfig.rewrite.steps.conditions`), raising
:class:`~ampconfig.contracts.ContractBroken` naming the step, as the decision passes do: admit and raise the opset
for bfloat16 (once, sharing an :class:`~ampconfig.rewrite.steps.run_context.InputAdmission`), then name, fold, type,
read the weights, decide, apply, record, check (per attempt). A step talks through the model and one small typed
context, :class:`~ampconfig.rewrite.steps.run_context.RewriteRun` (the options read, what the admission found, what each
step left for the next), so a step runs alone on a model and a context that holds what it requires
(tests/rewrite/steps/test_contracts.py). :mod:`ampconfig.rewrite.pipeline` runs them in PassManagers."""
