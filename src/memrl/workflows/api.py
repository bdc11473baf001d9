"""The workflow API: a workflow is one small object, an episode does the bookkeeping.

A workflow says what an agent does; everything the trainer needs from a model call
(the exact prompt and generated ids, the loss mask, the sampling log-probs, a seed per
turn, the stop token) is recorded by :class:`Episode` as the workflow calls
:meth:`Episode.generate`. The smallest workflow::

    class SayWord(Workflow):
        name = "say_word"

        async def run(self, ep: Episode) -> None:
            out = await ep.generate([{"role": "user", "content": ep.sample["prompt"]}], max_new_tokens=8)
            ep.reward(float(ep.sample["word"] in out.lower()))

Its options are a pydantic model (``class Options(BaseModel)``) validated from the
config's ``workflow.options``; its samples are plain records (``load_samples``).
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from memrl.engines.base import Engine, GenerationResult, SamplingParams
from memrl.io.json_strings import json_strings
from memrl.plugins import finite_number, finite_reward
from memrl.workflows.metric_names import TRAINER_METRICS, TRAINER_PREFIXES
from memrl.types import Conversation, Trajectory
from memrl.text.tokens import chat_ids  # noqa: F401 (part of this module's API since it was written here)
from memrl.workflows.common import anchor, decode, state_key, encode_text, stop_token_ids, strip_stop, turn_seed  # noqa: F401
from memrl.workflows.options import NoOptions, options_error, strict_options  # noqa: F401 (this module's API)


def check_train_file(path: str, in_folder: str = "give a JSONL, JSON or parquet file") -> None:
    """A one-line ValueError naming ``data.train_file`` when ``path`` is a folder (``in_folder`` says what to give
    instead) or no file."""
    if Path(path).is_dir():
        raise ValueError(f"data.train_file: {path} is a folder; {in_folder}")
    if not Path(path).is_file():
        raise ValueError(f"data.train_file: file not found: {path}")


class Generation(str):
    """The text one model call generated (stop token stripped), carrying its token-level record."""

    ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    prompt_ids: list[int]
    conversation: Conversation

    def __new__(cls, text: str, *, result: GenerationResult, stops: Sequence[int], prompt_ids: list[int],
                conversation: Conversation) -> Generation:
        self = super().__new__(cls, text)
        self.token_ids = list(result.token_ids)
        self.ids = strip_stop(result.token_ids, stops)
        self.logprobs = list(result.logprobs)
        self.finish_reason = result.finish_reason
        self.prompt_ids = prompt_ids
        self.conversation = conversation
        return self

    @property
    def text(self) -> str:
        return str(self)

    @property
    def truncated(self) -> bool:
        """The call ran out of ``max_new_tokens`` before a stop token."""
        return self.finish_reason == "length"


# Prompts longer than this (characters) are tokenized in a worker thread: every episode of a step shares one event
# loop, and tokenizing megabytes on it stalls all the others (short prompts stay inline: a thread costs more).
OFF_LOOP_CHARS = 64 * 1024


MESSAGE_CHARS = 64  # what one chat message costs to render beyond its text (the template's markers), in characters


def prompt_chars(prompt: Any) -> int:
    """Characters to render for a prompt given as text, chat messages (every string in them: contents, text
    parts, tool-call arguments, names; plus :data:`MESSAGE_CHARS` each: 250,000 empty messages are work too)
    or token ids (0). Counting contents only let 5 MB of tool-call arguments be rendered on the shared loop."""
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, Sequence):
        return sum(sum(map(len, json_strings(dict(m), max_depth=32))) + MESSAGE_CHARS if isinstance(m, Mapping) else
                   len(m) if isinstance(m, str) else 0 for m in prompt)
    return 0


class Episode:
    """One episode of one sample: the model calls made so far, the reward and the metrics.

    ``services`` are the side engines and objects the workflow asked for once per run
    (:meth:`Workflow.build_services`), e.g. a user simulator; ``info`` holds anything
    human-facing worth saving with the rollout (the final answer, a transcript).
    """

    def __init__(self, sample: Any, *, engine: Engine, tokenizer: Any, sampling: SamplingParams,
                 options: Any = None, services: Mapping[str, Any] | None = None, sample_id: str | None = None,
                 group_id: str | None = None, workflow: str = "workflow") -> None:
        self.sample = sample
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.options = options
        self.services: Mapping[str, Any] = services if services is not None else {}
        self.sample_id = sample_id if sample_id is not None else default_id(sample)
        self.group_id = group_id if group_id is not None else sample_id
        self.workflow = workflow
        self.conversations: list[Conversation] = []
        self.metrics: dict[str, float] = {}
        self.info: dict[str, Any] = {}
        self.calls = 0
        self.merges = [0, 0]  # merge=True calls after the first, and those whose prompt did not extend the last
        self._reward: float | None = None
        self._stops: tuple[int, ...] | None = None

    @property
    def stops(self) -> tuple[int, ...]:
        """The tokenizer's EOS and end-of-turn ids: where a model call ends by default."""
        if self._stops is None:
            self._stops = stop_token_ids(self.tokenizer)
        return self._stops

    def encode(self, prompt: Sequence[int] | str | Sequence[Mapping[str, Any]],
               tools: Sequence[Any] | None = None) -> list[int]:
        """Token ids of a prompt given as ids, raw text, or chat messages."""
        if isinstance(prompt, str):
            return encode_text(self.tokenizer, prompt)
        items = list(prompt)
        if items and isinstance(items[0], Mapping):
            return chat_ids(self.tokenizer, items, tools)
        if any(isinstance(t, bool) or not isinstance(t, int) for t in items):
            raise TypeError("a prompt is token ids (ints), a string, or a list of chat messages (dicts)")
        return [int(t) for t in items]

    async def generate(self, prompt: Sequence[int] | str | Sequence[Mapping[str, Any]], *, max_new_tokens: int,
                       tools: Sequence[Any] | None = None, temperature: float | None = None,
                       top_p: float | None = None, stop_token_ids: Sequence[int] | None = None,
                       merge: bool = False, state: Hashable | None = None, stop: Sequence[str] = ()) -> Generation:
        """One model call, recorded as a conversation of this episode; returns what was generated.

        ``stop``: strings an engine that reads text ends the call on (the token completing one is the last
        recorded; the text is not cut, and an engine without a tokenizer runs on to ``max_new_tokens``).

        ``merge=True`` extends the last conversation instead when the new prompt starts with
        all of its tokens (a chat continued turn by turn is then one training sequence).
        ``state``: the turn's anchor state, what the agent saw (e.g. :func:`anchor` of it); ``gigpo``
        compares the turns of a prompt group that share one. A merged turn keeps its conversation's first.
        """
        if prompt_chars(prompt) > OFF_LOOP_CHARS:  # the loop is every episode's: a 5 MB prompt must not stall it
            ids = await asyncio.to_thread(self.encode, prompt, tools)
        else:
            ids = self.encode(prompt, tools)
        stops = tuple(stop_token_ids) if stop_token_ids is not None else self.stops
        changes: dict[str, Any] = {"max_new_tokens": int(max_new_tokens), "stop_token_ids": stops}
        if stop:
            changes["stop"] = tuple(stop)
        if temperature is not None:
            changes["temperature"] = float(temperature)
        if top_p is not None:
            changes["top_p"] = float(top_p)
        params = turn_seed(self.sampling.with_(**changes), self.calls)
        self.calls += 1
        result = await self.engine.generate(ids, params)
        conv = self._record(ids, result, merge)
        if state is not None and conv.state is None:
            conv.meta["state"] = state_key(state)
        text = decode(self.tokenizer, strip_stop(result.token_ids, stops))
        return Generation(text, result=result, stops=stops, prompt_ids=ids, conversation=conv)

    def _record(self, ids: list[int], result: GenerationResult, merge: bool) -> Conversation:
        last = self.conversations[-1] if self.conversations else None
        self.merges[0] += int(merge and last is not None)
        if merge and last is not None and len(ids) >= last.num_tokens and ids[:last.num_tokens] == last.token_ids:
            last.append(ids[last.num_tokens:], generated=False)
            last.append(result.token_ids, generated=True, logprobs=result.logprobs)
            last.meta["finish"] = result.finish_reason  # the conversation's last turn's
            return last
        if merge and last is not None:  # (tried above: a re-templated history that changed starts a new one)
            self.merges[1] += 1
        conv = Conversation.from_prompt_response(ids, result.token_ids, result.logprobs,
                                                 meta={"finish": result.finish_reason})
        self.conversations.append(conv)
        return conv

    def reward(self, value: float) -> None:
        """The episode's outcome reward (a finite number); the last call wins."""
        self._reward = finite_reward(value, f"workflow {self.workflow!r}: ep.reward got")

    def turn_reward(self, value: float) -> None:
        """A reward of the latest conversation's own (added to what it has: merged turns sum), for the
        per-turn estimators; the episode's outcome reward (:meth:`reward`) is separate and still needed."""
        if not self.conversations:
            raise ValueError(f"workflow {self.workflow!r}: ep.turn_reward before any ep.generate")
        conv = self.conversations[-1]
        conv.reward = (conv.reward or 0.0) + finite_reward(value, f"workflow {self.workflow!r}: ep.turn_reward got")

    def metric(self, name: str, value: float) -> None:
        """A scalar logged as the mean over a step's episodes under ``name`` in metrics.jsonl (a name the trainer
        writes itself is refused: the two would overwrite each other there)."""
        name = str(name)
        if name in TRAINER_METRICS or name.startswith(TRAINER_PREFIXES):
            raise ValueError(f"workflow {self.workflow!r}: ep.metric({name!r}): the trainer writes {name!r} itself; "
                             "give the workflow's metric another name")
        self.metrics[name] = finite_number(value, f"workflow {self.workflow!r}: ep.metric({name!r}) got")

    @property
    def rewarded(self) -> bool:
        return self._reward is not None

    def trajectory(self) -> Trajectory:
        """The finished episode as the trainer consumes it."""
        if self._reward is None:
            raise ValueError(f"workflow {self.workflow!r} finished an episode of sample {self.sample_id} without "
                             "calling ep.reward(value)")
        if not self.conversations:
            raise ValueError(f"workflow {self.workflow!r} finished an episode of sample {self.sample_id} without "
                             "a model call (ep.generate): there is nothing to train on")
        metrics = {"num_conversations": float(len(self.conversations)),
                   "response_tokens": float(sum(c.num_generated for c in self.conversations)), **self.metrics}
        if self.merges[0]:  # over the episodes that merged: the mean is the share of their calls that could not
            metrics["merge_missed"] = self.merges[1] / self.merges[0]
        return Trajectory(conversations=self.conversations, reward=self._reward, sample_id=self.sample_id,
                          group_id=self.group_id, metrics=metrics, info=dict(self.info))


def default_id(sample: Any) -> str:
    """A sample's own id (``id`` of a record, ``index`` of a built-in sample), else "0"."""
    if isinstance(sample, Mapping) and not hasattr(sample, "index"):  # a record (a built-in sample is a mapping too)
        return str(sample.get("id", sample.get("index", 0)))
    return str(getattr(sample, "index", 0))


def check_defined(workflow: Any) -> None:
    """Refuse, before any model loads, a workflow class whose episodes could only fail: one without its own
    ``async def run(self, ep)`` (a typo in the name, a plain ``def``), unless it runs episodes its own way."""
    cls = type(workflow)
    if not isinstance(workflow, Workflow) or cls.episode is not Workflow.episode:
        return
    label = getattr(workflow, "label", cls.__name__)
    if cls.run is Workflow.run:
        own = [n for c in cls.__mro__[:cls.__mro__.index(Workflow)] for n in vars(c) if not n.startswith("_")]
        close = difflib.get_close_matches("run", own, n=1, cutoff=0.5)
        hint = f" ({close[0]!r} is defined: a typo?)" if close else ""
        raise ValueError(f"workflow {label!r} defines no run method{hint}: add async def run(self, ep)")
    if not inspect.iscoroutinefunction(cls.run):
        raise ValueError(f"workflow {label!r}: run must be a coroutine, async def run(self, ep) (it is a plain def)")


class Workflow:
    """Base class of workflows: override :meth:`run`; optionally ``Options``, ``load_samples``, services.

    ``Workflow(**options)`` validates the options now, so a typo fails where it was made;
    a config's ``workflow.options`` reaches the same constructor.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    uses_env: ClassVar[bool] = False  # episodes depend on the config's env section (domain, split, grading)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Options" in cls.__dict__:  # a plain `class Options(BaseModel)` would drop a typo'd key silently
            cls.Options = strict_options(cls.Options)

    def __init__(self, **options: Any) -> None:
        self.options = self._validated(options)
        self.config: Any = None  # the whole run config, set by setup() (None from plain Python)
        self.services: dict[str, Any] = {}

    def _validated(self, options: Mapping[str, Any]) -> BaseModel:
        """The options as this workflow's model; a one-line ValueError (nearest name for a typo) otherwise."""
        try:
            return self.Options(**dict(options))
        except ValidationError as exc:
            raise ValueError(options_error(exc, self.label, self.Options)) from None

    def with_options(self, options: Mapping[str, Any]) -> Workflow:
        """A copy whose options are these (validated); the original is unchanged."""
        twin = copy.copy(self)
        twin.options = self._validated(options)
        return twin

    def bind(self, config: Any) -> Workflow:
        """Give the workflow the run's config (data files, env); returns self."""
        self.config = config
        return self

    def setup(self, config: Any) -> Workflow:
        """Bind the run's config and build the services its episodes share; once per run, returns self."""
        self.bind(config)
        self.services = self.build_services(config)
        return self

    @property
    def label(self) -> str:
        return self.name or type(self).__name__

    def load_samples(self, split: str) -> list[Any]:
        """The samples of ``split`` ('train' or 'eval'): by default the records of ``data.train_file`` /
        ``data.eval_file`` (JSONL, JSON list or parquet; plain dicts, no required fields)."""
        from memrl.data.records import iter_records

        path = self.data_file(split)
        return [] if path is None else [rec for _, rec in iter_records(path)]

    def data_file(self, split: str) -> str | None:
        """``data.train_file`` or ``data.eval_file`` of the bound config; the training file must be set."""
        data = getattr(self.config, "data", None)
        path = getattr(data, "train_file" if split == "train" else "eval_file", None)
        if path is None and split == "train":
            raise ValueError(f"workflow {self.label!r} reads data.train_file, which is not set")
        return path

    def build_services(self, config: Any) -> dict[str, Any]:
        """Side engines or objects the episodes share (``ep.services``), built once per run."""
        return {}

    def close(self) -> None:
        """End of the run: services with a synchronous ``close()`` (a gateway's server thread) are closed."""
        import inspect

        for service in self.services.values():
            close = getattr(service, "close", None)
            if callable(close) and not inspect.iscoroutinefunction(close):
                close()
        self.services = {}

    def norm_tokens(self) -> int | None:
        """Longest response of one conversation, if known (the seq-mean-token-sum-norm divisor)."""
        return None

    def check(self, config: Any) -> None:
        """Refuse a config this workflow cannot run, in one line (``ValueError``), before models load."""
        return None

    def check_data(self, config: Any) -> None:
        """Refuse missing data files (``ValueError``/``FileNotFoundError``) before models load; not called when
        the caller hands the samples over itself (``Trainer(..., train=...)``). By default, where the workflow
        reads its samples with the default :meth:`load_samples`: a ``data.train_file`` that is not a file."""
        path = getattr(getattr(config, "data", None), "train_file", None)
        if path and type(self).load_samples is Workflow.load_samples:  # its own reader: its own check
            check_train_file(path)

    def check_samples(self, config: Any, tokenizer: Any, samples: list[Any], warn: Callable[[str], None]) -> None:
        """Refuse (``ValueError``) or warn about loaded samples this run cannot learn from."""
        return None

    def data_source(self, config: Any, split: str) -> str:
        """Where the samples of ``split`` come from, for messages."""
        data = getattr(config, "data", None)
        return f"data.{split}_file {getattr(data, split + '_file', None)}"

    def state_advantage(self) -> tuple[float, float] | None:
        """(alpha, scale) of per-turn state advantages (``algorithm.step_rewards``); None: turns are not scored."""
        return None

    async def run(self, ep: Episode) -> None:
        raise NotImplementedError(f"workflow {self.label!r} must define async def run(self, ep)")

    async def episode(self, sample: Any, *, engine: Engine, tokenizer: Any, sampling: SamplingParams,
                      services: Mapping[str, Any] | None = None, sample_id: str | None = None,
                      group_id: str | None = None) -> Trajectory:
        """Run one episode of ``sample`` and return it as a Trajectory (what the trainer and eval call)."""
        ep = Episode(sample, engine=engine, tokenizer=tokenizer, sampling=sampling, options=self.options,
                     services=self.services if services is None else services, sample_id=sample_id,
                     group_id=group_id, workflow=self.label)
        await self.run(ep)
        return ep.trajectory()

    async def __call__(self, sample: Any, engine: Engine, tokenizer: Any, config: Any = None, *,
                       sampling: SamplingParams | None = None, sample_id: str | None = None,
                       group_id: str | None = None) -> Trajectory:
        """The old workflow-function call: ``config`` is ignored (the object has its options)."""
        return await self.episode(sample, engine=engine, tokenizer=tokenizer,
                                  sampling=sampling or SamplingParams(greedy=True), sample_id=sample_id,
                                  group_id=group_id)
