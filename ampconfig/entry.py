"""The ``ampconfig`` console script's first module: it imports nothing heavy before it can answer a signal.

Two things must happen before the model libraries' imports (onnx, the decision engine):

- **Ctrl-C during start-up** is a quiet exit 130, as at every later moment, not a ``KeyboardInterrupt`` traceback
  (SIGTERM and SIGHUP keep their default action until the command line installs its handlers: nothing is written
  yet, so there is nothing to take back);
- **the ONNX Runtime worker is forked** (:func:`ampconfig.worker.client.prestart`) for a command that will run
  models, while this process still has one thread: later, ONNX Runtime's import has started threads of its own,
  and a fork could deadlock. For a command that runs a model only when asked, the prediction reads the table of
  shared options (:data:`ampconfig.settings.flags.SHARED_OPTIONS`, through :mod:`ampconfig.cli.model_runs`:
  typer and the table, which the command line imports next anyway, and which start no thread). A command that
  turns out to run a model the prediction missed still gets a worker, started as a new interpreter.
"""

import sys  # loaded with the interpreter: no import step before the handler below

try:  # Ctrl-C from the first import of this module on: a quiet exit 130
    import os
    from collections.abc import Sequence
except KeyboardInterrupt:
    sys.stderr.write("error: interrupted\n")
    raise SystemExit(130) from None

#: Whatever the command, these only print.
_PRINT_ONLY = frozenset({"--help", "-h", "--version"})
#: The commands that run a model in ONNX Runtime whatever they are given.
ALWAYS_RUN = frozenset({"run", "calibrate", "compare", "tune"})
#: The commands that run one when asked, and their own options that ask (the shared options that do are marked in
#: their table, :data:`ampconfig.settings.flags.SHARED_OPTIONS`).
RUN_WHEN_ASKED: dict[str, tuple[str, ...]] = {"explain": ("--compare",), "rewrite": (), "lock": (), "diff": ("--run",)}


def runs_models(args: Sequence[str]) -> bool:
    """Whether the command line ``args`` will run a model in ONNX Runtime (a prediction from its words and the
    session config it names). Only a command of :data:`RUN_WHEN_ASKED` reads the table of shared options (and so
    imports typer) before the worker is forked."""
    if _PRINT_ONLY.intersection(word.split("=", 1)[0] for word in args):
        return False
    command = next((word for word in args if not word.startswith("-")), None)
    if command is None or command not in RUN_WHEN_ASKED:
        return command in ALWAYS_RUN
    from ampconfig.cli.model_runs import asked_to_run

    return asked_to_run(command, args, RUN_WHEN_ASKED[command])


def _import_numpy_unthreaded() -> None:
    """NumPy imported before the fork, so the worker does not import it again, with its BLAS kept to this thread:
    OpenBLAS starts its thread pool at import, and a process with threads is not forked. This process uses BLAS
    for a few vector norms only. A thread count the user set stays theirs (the worker is then started anew)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401


def main() -> None:
    """Start the worker when the command will need it, then hand over to :func:`ampconfig.cli.main`."""
    try:
        if runs_models(sys.argv[1:]):
            _import_numpy_unthreaded()
            from ampconfig.worker.client import prestart

            prestart()
        from ampconfig.cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    command_line()
