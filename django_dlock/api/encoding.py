"""Requests whose URL does not decode as UTF-8.

Django does not refuse them: ``WSGIRequest`` percent-encodes again the bytes of
the path that are not UTF-8 (``repercent_broken_unicode``), so
``/locks/a%ED%A0%80b`` reaches the view as the literal name ``a%ED%A0%80b``,
indistinguishable from a client that meant those characters (sent as
``a%25ED...``): the raw path is gone from ``request.META`` by then. A query
string is decoded with replacement characters (``?prefix=%FF`` is ``"\\ufffd"``),
but its raw form stays in ``QUERY_STRING``.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote_to_bytes

from django.http import HttpRequest


def path_is_utf8(request: HttpRequest) -> bool:
    """Whether the request's path, percent-decoded, was UTF-8.

    Under ASGI the server keeps the raw path (``scope["raw_path"]``), which
    decides. Under WSGI, a path that still percent-decodes to bytes that are not
    UTF-8 counts as one that was not UTF-8: Django's re-encoding leaves exactly
    that, so a name with a literal ``%ED%A0%80`` cannot be used over HTTP.
    """
    scope = getattr(request, "scope", None)
    raw = scope.get("raw_path") if isinstance(scope, dict) else None
    path = raw if isinstance(raw, bytes) else request.path_info.encode("utf-8")
    try:
        unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def query_parameters_not_utf8(request: HttpRequest) -> list[str]:
    """The names of the query parameters whose values are not UTF-8 once
    percent-decoded (Django would have replaced those bytes with U+FFFD)."""
    query = request.META.get("QUERY_STRING", "")
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    bad: list[str] = []
    for name, value in parse_qsl(query, keep_blank_values=True, encoding="latin-1"):
        try:
            value.encode("latin-1").decode("utf-8")
        except UnicodeError:
            bad.append(name.encode("latin-1").decode("utf-8", "replace"))
    return bad
