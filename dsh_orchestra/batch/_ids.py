"""Ids keep their identity: an id that holds a secret's value is refused before anything runs.

Result lines are redacted as they are written (a runtime may echo a secret anywhere), but an id
is how a resumed run knows an item is done, and it names its transcript and workspace: it must
never change. So no id may contain a secret (compared case-insensitively, as file names fold
case on some systems); the message names the dataset line, never the id (it holds the secret).
"""

from __future__ import annotations

from typing import Iterable

import orjson

from ._dataset import DatasetCheck
from ._options import BatchUsageError

MIN_SECRET_IN_ID = 4
"""Shorter secret values are not looked for in ids (they would match ordinary ids)."""


def check_ids_hold_no_secret(check: DatasetCheck, secrets: Iterable[str]) -> None:
    """Refuse a dataset (of this shard) one of whose ids contains a secret's value.

    Raises:
        BatchUsageError: naming the dataset line(s), not the id.
    """
    lowered = sorted({s.lower() for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_IN_ID}, key=len)
    if not lowered:
        return
    bad = {i for i in check.ids if any(secret in i.lower() for secret in lowered)}
    if not bad:
        return
    data = check.data if check.data is not None else check.path.read_bytes()
    numbers: list[int] = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("id") in bad:
            numbers.append(number)
    where = ", ".join(map(str, numbers[:10])) + (" ..." if len(numbers) > 10 else "")
    raise BatchUsageError(
        f"dataset {str(check.path)!r} line {where}: the id contains the value of a secret (the API key or an "
        "environment variable such as *_KEY, *_TOKEN, *_PAT); ids are written as they are, never redacted, "
        "so give that item another id"
    )
