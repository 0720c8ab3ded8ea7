"""Runs the error corpus: every `.tawa` file here is a bad program whose first line states the expected error,
`# ERROR: LINE:COLUMN: MESSAGE`. Compiling it must raise exactly one CompilationError with that message at that
position (and the printed error must show the offending source line)."""
from __future__ import annotations

import pathlib
import re

import pytest

from tawa.errors import CompilationError, TawaError
from tawa.frontend import parse_and_lower, read_source

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = sorted(HERE.glob("*.tawa"))
HEADER = re.compile(r"# ERROR: (\d+):(\d+): (.*)")


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_error(path):
    source, filename = read_source(str(path))
    m = HEADER.match(source)
    assert m, f"{path.name}: first line must be '# ERROR: LINE:COLUMN: MESSAGE'"
    line, column, message = int(m.group(1)), int(m.group(2)), m.group(3)
    with pytest.raises(CompilationError) as info:
        parse_and_lower(source, filename)
    err = info.value
    assert isinstance(err, TawaError)
    assert err.message == message
    assert (err.location.line, err.location.column) == (line, column)
    assert err.location.filename == filename
    text = str(err)
    assert text.startswith(f"{filename}:{line}:{column}: error: {message}")
    assert source.splitlines()[line - 1].strip() in text        # the source line is shown
