"""What a message may show of a URI: never its user-info (``scheme://user:password@host``).

Shared by the command line (stderr) and the Checkpoints view: endpoint URLs of S3-compatible
servers may carry a password, and store errors name their endpoint.
"""

from __future__ import annotations

import re

_URI_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s'\"@]+@")


def without_uri_userinfo(text: str) -> str:
    """``text`` with the user-info of every URI in it removed."""
    return _URI_USERINFO.sub(r"\1", text)
