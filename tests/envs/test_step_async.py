"""Environment.step_async: a ``blocking`` tool runs in a worker thread, the event loop goes on; others stay put."""

from __future__ import annotations

import asyncio
import threading

import pytest

from memrl.envs.environment import Environment
from memrl.envs.messages import ToolCall
from memrl.envs.toolkit import Toolkit, tool


class Kit(Toolkit):
    def __init__(self, db):
        super().__init__(db)
        self.release = threading.Event()
        self.threads: list[int] = []

    @tool("read", blocking=True)
    def wait_outside(self, what: str) -> str:
        """Wait for something outside the process (a sandboxed command, a server).

        Args:
            what: What to wait for.
        """
        self.threads.append(threading.get_ident())
        if not self.release.wait(timeout=10):
            raise TimeoutError("nobody released me")
        return f"got {what}"

    @tool("read")
    def quick(self, what: str) -> str:
        """Answer at once.

        Args:
            what: What to answer.
        """
        self.threads.append(threading.get_ident())
        return what.upper()


def env() -> Environment:
    return Environment("test", "policy", Kit({}))


def test_a_blocking_tool_leaves_the_event_loop_free():
    """The tool waits until another coroutine releases it: were it run on the loop, nothing could."""
    e = env()

    async def main():
        async def release_later():
            await asyncio.sleep(0.05)
            e.tools.release.set()

        obs, _ = await asyncio.wait_for(asyncio.gather(e.step_async(ToolCall("wait_outside", {"what": "x"})),
                                                       release_later()), timeout=20)
        return obs

    obs = asyncio.run(main())
    assert obs.content == "got x" and not obs.error
    assert e.tools.threads[0] != threading.get_ident()


def test_other_tools_run_on_the_loop_in_order_and_observations_equal_step():
    e, plain = env(), env()
    e.tools.release.set()
    plain.tools.release.set()
    calls = [ToolCall("quick", {"what": "a"}), ToolCall("nope", {}), ToolCall("quick", {}),
             ToolCall("wait_outside", {"what": "y"}), ToolCall("quick", {"what": "b"}, requestor="user")]

    async def main():
        return [await e.step_async(c) for c in calls]

    got = asyncio.run(main())
    want = [plain.step(c) for c in calls]
    assert [(m.content, m.error, m.call_id) for m in got] == [(m.content, m.error, m.call_id) for m in want]
    assert e.tools.threads[0] == threading.get_ident()  # quick: on the loop's (this) thread


@pytest.mark.parametrize("mixin, name", [("KBSearchMixin", "KB_search"), ("GrepMixin", "grep"),
                                         ("KBSearchDenseMixin", "KB_search_dense"), ("ShellMixin", "shell")])
def test_banking_retrieval_tools_are_blocking(mixin, name):
    from memrl.envs.domains.banking_knowledge import toolkits

    assert getattr(getattr(toolkits, mixin), name).__memrl_blocking__ is True
