"""A fake in the middle of a runtime's stdin: ``python wire_tap.py LOG -- COMMAND...``.

Runs COMMAND (the runtime) with its stdout and stderr inherited, copies every line the client
writes to it, and appends each ``session/prompt`` request to LOG (one JSON line, written
before the runtime sees it), so a test counts the prompts a client sent, across processes
and kills. It exits when the client closes its stdin (or dies), after the runtime.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> int:
    log, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    runtime = subprocess.Popen(command, stdin=subprocess.PIPE)
    assert runtime.stdin is not None
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for line in sys.stdin.buffer:
            if b'"session/prompt"' in line:
                os.write(fd, line if line.endswith(b"\n") else line + b"\n")
            runtime.stdin.write(line)
            runtime.stdin.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        os.close(fd)
        try:
            runtime.stdin.close()
        except BrokenPipeError:
            pass
    return runtime.wait()


if __name__ == "__main__":
    sys.exit(main())
