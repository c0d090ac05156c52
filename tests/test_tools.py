"""The scripts in tools/ run only on the device machine or by hand: at least they must compile."""

from pathlib import Path
import pytest

TOOLS = sorted((Path(__file__).parent.parent / "tools").glob("*.py"))


@pytest.mark.parametrize("path", TOOLS, ids=[p.name for p in TOOLS])
def test_tool_compiles(path):
    compile(path.read_text(), str(path), "exec")
