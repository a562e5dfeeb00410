# SPDX-License-Identifier: MIT
"""Documentation/python.rst's worked example runs as written."""

import contextlib
import io
import os
import re


HERE = os.path.dirname(os.path.abspath(__file__))
RST = os.path.join(HERE, "..", "..", "Documentation", "python.rst")


def example():
    with open(RST) as f:
        text = f.read()
    start = text.index("A worked example")
    block = text[start:].split("::\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def test_worked_example(daemon):
    code = example()
    assert "client.step(" in code and "final_merge" in code
    code = code.replace('"127.0.0.1", 7070', '"127.0.0.1", %d' % daemon.port)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, RST, "exec"), {"__name__": "example"})
    got = out.getvalue().splitlines()
    assert len(got) == 2 and all(re.match(r"head \d output \(4, 64\) lse", g) for g in got), got
    assert not any("nan" in g for g in got)
