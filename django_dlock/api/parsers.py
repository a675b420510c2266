"""The lock API's JSON parser: every body it cannot read is a 400 problem (a
413 when it is over Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``), never a 500."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.utils.translation import gettext_lazy as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from django_dlock.api.problems import RequestTooLarge

# A lock's body is one flat object; anything nested deeper is refused before
# parsing, the same way on every Python (3.12's json parses 1,000 levels that
# 3.11's cannot, and neither should be asked to).
MAX_DEPTH = 32


class LockJSONParser(JSONParser):
    """DRF's ``JSONParser``, bounded in size, nesting and character set."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        body = read_limited(stream)
        if nesting_depth(body) > MAX_DEPTH:
            raise ParseError(_("JSON parse error - nested too deeply."))
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            # Python's json recurses once per nesting level: deep enough, it
            # exhausts the stack (a body in an encoding that nesting_depth()
            # cannot read gets here).
            raise ParseError(_("JSON parse error - nested too deeply.")) from None
        except LookupError:  # codecs.getreader of an unknown charset=
            raise ParseError(_("The Content-Type names an unknown charset.")) from None


def read_limited(stream: IO[bytes]) -> bytes:
    """The whole body, or ``RequestTooLarge`` past ``DATA_UPLOAD_MAX_MEMORY_SIZE``.

    DRF hands the parser Django's request stream, which does not check the limit
    (only ``request.body`` does), so it is checked here.
    """
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        body = stream.read() if limit is None else stream.read(limit + 1)
    except RequestDataTooBig:
        raise RequestTooLarge() from None
    if limit is not None and len(body) > limit:
        raise RequestTooLarge()
    return body


def nesting_depth(body: bytes) -> int:
    """How deep ``[`` and ``{`` nest in a JSON text (outside its strings)."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0  # cannot be deeper: skip the scan for every ordinary body
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # closing quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest
