"""Every code block of docs/SDK_PYTHON.md runs, against the real server.

Each block runs as written, in a namespace where the names the page takes
for granted are defined: ``client`` (an admin client of the server under
test), ``name`` and ``names`` (locks no other test uses), ``plan`` (steps
whose ``run(fencing_token=...)`` records the token), ``DSN`` and a stand-in
``psycopg`` (the fenced write's database: the SQL itself is the fence
guard's, tested in Go against PostgreSQL). The page's server URL,
http://localhost:8080, is the server under test. A block must leave every
lock it took free, as a sample a reader copies should.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import threading
import types
import unittest
from pathlib import Path
from typing import Any, Dict, Generator, List, Tuple

import lockapi
from support import ADMIN_KEY, BASE_URL, ServerTestCase

PAGE = Path(__file__).resolve().parents[3] / "docs" / "SDK_PYTHON.md"

# The fixed names the samples use.
SAMPLE_LOCKS = ["deploy:prod", "orders:7", "stock:1", "stock:2"]


def code_blocks(text: str) -> List[Tuple[int, str, str]]:
    """The fenced blocks of a Markdown page: (line of the fence, language, code)."""
    blocks: List[Tuple[int, str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            start, lang = i + 1, m.group(1)
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            blocks.append((start, lang, "\n".join(lines[i + 1:j]) + "\n"))
            i = j
        i += 1
    return blocks


class Step:
    def __init__(self) -> None:
        self.tokens: List[int] = []

    def run(self, fencing_token: int) -> None:
        self.tokens.append(fencing_token)


class FakeConnection:
    """psycopg's connection, as far as the fenced write uses it."""

    def __init__(self) -> None:
        self.statements: List[Tuple[str, Any]] = []

    def __enter__(self) -> "FakeConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @contextlib.contextmanager
    def transaction(self) -> Generator[None, None, None]:
        yield

    def execute(self, sql: str, params: Any = None) -> Any:
        self.statements.append((sql, params))
        return types.SimpleNamespace(fetchone=lambda: (True,))


class DocSamplesTest(ServerTestCase):
    def test_every_block_runs(self) -> None:
        if not PAGE.exists():
            raise unittest.SkipTest("%s: not in a checkout of the repository" % PAGE)
        blocks = code_blocks(PAGE.read_text(encoding="utf-8"))
        self.assertGreaterEqual(len(blocks), 10, "the page's code blocks were not found")
        for line, lang, code in blocks:
            with self.subTest(line=line):
                self.assertEqual(lang, "python", "a block that is no Python cannot run here: fence it as python")
                self.run_block(line, code)
        print("\ntest_docs: %d code blocks of %s ran" % (len(blocks), PAGE.name), file=sys.stderr)

    def run_block(self, line: int, code: str) -> None:
        code = code.replace("http://localhost:8080", BASE_URL)
        client = lockapi.Client(BASE_URL, api_key=ADMIN_KEY, timeout=10)
        self.addCleanup(client.close)
        step = Step()
        db = FakeConnection()
        psycopg = types.ModuleType("psycopg")
        psycopg.connect = lambda dsn: db  # type: ignore[attr-defined]
        ns: Dict[str, Any] = {
            "__name__": "__doc_sample__",
            "lockapi": lockapi,
            "os": os,
            "client": client,
            "name": self.name("docs"),
            "names": [self.name("docs"), self.name("docs")],
            "plan": [step, step],
            "DSN": "postgresql://localhost/app",
        }
        stop = threading.Event()
        producer = None
        if "client.events(" in code:
            # Lock changes to see, until the block has seen one.
            producer = threading.Thread(target=self.produce, args=(stop,), daemon=True)
            producer.start()
        saved = sys.modules.get("psycopg")
        sys.modules["psycopg"] = psycopg
        # The logging sample configures logging: put it back afterwards.
        root, lockapi_logger = logging.getLogger(), logging.getLogger("lockapi")
        saved_logging = (root.handlers[:], root.level, lockapi_logger.level)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, "%s:%d" % (PAGE.name, line), "exec"), ns)
        finally:
            stop.set()
            if producer is not None:
                producer.join()
            root.handlers[:], root.level = saved_logging[0], saved_logging[1]
            lockapi_logger.setLevel(saved_logging[2])
            if saved is None:
                del sys.modules["psycopg"]
            else:
                sys.modules["psycopg"] = saved
        if "plan" in code:
            self.assertTrue(step.tokens, "the plan's steps ran")
        if "psycopg" in code:
            self.assertIn("lockapi_fence_admit", db.statements[0][0])
        if "client.events(" in code:
            self.assertIn("released", out.getvalue())
        for lock in SAMPLE_LOCKS + [ns["name"]] + list(ns["names"]):
            self.assertFalse(self.client.inspect(lock).get("held"), "the sample left %s held" % lock)

    def produce(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self.client.lock("deploy:docs-sample", ttl=5, wait=5):
                pass
            stop.wait(0.05)


if __name__ == "__main__":
    unittest.main()
