"""A Ctrl-C swallowed while a command starts (raised inside a finalizer or a C++ callback, where Python drops
it) still stops the command at its next step, instead of letting it run to the end."""

from __future__ import annotations

import gc
import signal

import pytest
from rich.console import Console

from memrl import interrupts
from memrl.cli.progress import progress
from memrl.train.signals import RaiseOnSignal, StageInterrupted, StopRequest


class _Finalized:
    """An object whose finalizer is running when the signal arrives: Python prints and drops the interrupt."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def _swallow_a_ctrl_c() -> None:
    _Finalized()  # its __del__ runs at once; the KeyboardInterrupt raised there is "ignored" by Python
    gc.collect()


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Python's "ignored"


@pytest.fixture(autouse=True)
def _pythons_sigint_handler():
    """Python's own SIGINT handler, as in a terminal: a suite started as a background job (``make test &``)
    inherits SIGINT ignored, Python then installs none, and memrl rightly leaves such a process alone."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_python_drops_it_and_memrl_keeps_it():
    with interrupts.remembered():
        _swallow_a_ctrl_c()  # returns normally: without memrl, nothing would remember the Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        interrupts.check()  # acted on once
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_next_progress_step_stops_the_command():
    console = Console(file=open("/dev/null", "w"), force_terminal=False)
    with interrupts.remembered():
        with progress(console, "eval", total=3) as bar:
            bar.advance()
            _swallow_a_ctrl_c()
            with pytest.raises(KeyboardInterrupt):
                bar.advance()


def test_a_stage_or_the_training_loop_entered_after_it_acts_on_it(capfd):
    with interrupts.remembered():
        _swallow_a_ctrl_c()
        with pytest.raises(StageInterrupted):
            with RaiseOnSignal():
                pass
        assert signal.getsignal(signal.SIGINT) is interrupts._record_and_raise  # the scope's handler is gone
        _swallow_a_ctrl_c()
        with StopRequest() as stop:
            assert stop.signum == signal.SIGINT  # the loop finishes its step, checkpoints and exits
        assert "SIGINT: finishing the current step" in capfd.readouterr().err  # written with os.write


@pytest.mark.parametrize("signum, code, said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_an_error_left_by_a_signal_is_reported_as_the_signal(signum, code, said):
    """SIGTERM cut an import half-way; the command failed later with a RecursionError / ModuleNotFoundError
    traceback and exit 1 instead of one line and 128 + signal."""
    import typer
    from typer.testing import CliRunner

    from memrl.cli.errors import user_errors

    app = typer.Typer()

    @app.command()
    @user_errors
    def start(broken: bool = True) -> None:
        interrupts.record(signum)  # what the handler did when the signal came
        raise RecursionError("maximum recursion depth exceeded")  # what the half-done import left

    @app.command()
    @user_errors
    def fine() -> None:
        raise ValueError("a real mistake")

    r = CliRunner().invoke(app, ["start"])
    assert r.exit_code == code and said in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(app, ["fine"])  # no signal: the error is the command's own
    assert r.exit_code == 2 and "error: a real mistake" in r.output


def test_asyncio_run_gets_pythons_handler_and_so_its_own_ctrl_c():
    """asyncio.run cancels its main task on Ctrl-C only when it finds Python's own handler; with memrl's, the
    KeyboardInterrupt landed inside an episode and was recorded as that episode's failure."""
    import asyncio

    seen = []

    async def main():
        seen.append(signal.getsignal(signal.SIGINT))
        signal.raise_signal(signal.SIGINT)  # asyncio's handler: the main task is cancelled, no KeyboardInterrupt here
        await asyncio.sleep(1)

    with interrupts.remembered():
        with interrupts.python_sigint():
            with pytest.raises(KeyboardInterrupt):  # asyncio.run turns the cancel into KeyboardInterrupt at the end
                asyncio.run(main())
        assert signal.getsignal(signal.SIGINT) is interrupts._record_and_raise
    assert seen and seen[0] is not interrupts._record_and_raise and seen[0] is not signal.default_int_handler
