"""Data: QA readers, MemAgent-format long-context files, and long-context synthesis."""

from memrl.data.errors import DataError
from memrl.data.hotpotqa import Paragraph, QAExample, read_hotpotqa, read_paragraph_pool
from memrl.data.longctx import LongContextSample, SampleWriter, read_samples, write_samples
from memrl.data.synth import FileReport, plan_synthesis

__all__ = [
    "DataError",
    "FileReport",
    "LongContextSample",
    "Paragraph",
    "QAExample",
    "SampleWriter",
    "plan_synthesis",
    "read_hotpotqa",
    "read_paragraph_pool",
    "read_samples",
    "write_samples",
]
