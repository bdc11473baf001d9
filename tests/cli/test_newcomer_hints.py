"""What a newcomer's first mistakes print: the right column of a broken JSONL row, a --tokenizer that does
not load, and the memrl name of a setting given under another library's name."""

from __future__ import annotations

import pytest

from memrl.data.errors import DataError
from memrl.data.records import iter_records


@pytest.mark.parametrize("row, column", [('{"a": 1, "b": ', 15), ('{"a": 1', 8), ('{"a" 1}', 6)])
def test_a_broken_jsonl_row_names_its_own_column(tmp_path, row, column):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 0}\n' + row + '\n{"a": 2}\r\n')
    with pytest.raises(DataError, match=rf"rows.jsonl:2: not valid JSON: .* \(column {column}\)$"):
        list(iter_records(path))
