"""Credentials inside URLs and address lists never reach a message or a log line.

>>> mask_credentials("SASL_SSL://bob:s3cret@host:9092,alice:pw@h2:9092")
'SASL_SSL://bob:***@host:9092,alice:***@h2:9092'
>>> mask_credentials("thrift://metastore:9083")
'thrift://metastore:9083'
"""

from __future__ import annotations

import re
from typing import Any

_USERINFO = re.compile(r"(?P<user>[^\s/@:'\",=]+):(?P<secret>[^\s/@'\",]+)@")


def mask_credentials(text: str) -> str:
    """``text`` with the password of every ``user:password@host`` replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m['user']}:***@", text)


def mask_value(value: Any) -> Any:
    """A configuration value with credentials in its strings masked (deeply)."""
    if isinstance(value, str):
        return mask_credentials(value)
    if isinstance(value, dict):
        return {key: mask_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_value(item) for item in value)
    return value
