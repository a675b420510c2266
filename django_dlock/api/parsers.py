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


class LockJSONParser(JSONParser):
    """DRF's ``JSONParser``, bounded in size, nesting and character set."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        body = read_limited(stream)
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            # Python's json recurses once per nesting level; about 1,000 levels
            # (2 KB of "[") exhaust the stack.
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
