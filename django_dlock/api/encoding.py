"""Requests whose URL path the router cannot be trusted with: a path that does
not decode as UTF-8, and a resource with an encoded ``/``.

**Not UTF-8.** Django does not refuse such a path: ``WSGIRequest``
percent-encodes again the bytes of the path that are not UTF-8
(``repercent_broken_unicode``), so ``/locks/a%ED%A0%80b`` reaches the view as
the literal name ``a%ED%A0%80b``, indistinguishable from a client that meant
those characters (sent as ``a%25ED...``) unless the server kept the raw path. A
query string is decoded with replacement characters (``?prefix=%FF`` is
``"\\ufffd"``), but its raw form stays in ``QUERY_STRING``.

**An encoded slash.** A WSGI server decodes ``%2F`` into ``PATH_INFO`` before
Django routes it (PEP 3333), so ``/locks/R%2Frenew`` would be routed as a renew
of ``R``. Only the raw path tells: ASGI's ``scope["raw_path"]``, gunicorn's
``RAW_URI``, and ``REQUEST_URI`` (uWSGI, mod_wsgi, waitress, Werkzeug). Where
the server passes none of them (Django's ``runserver`` and other servers built
on ``wsgiref``), ``R%2Frenew`` and ``R/renew`` are the same request.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote_to_bytes

from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

# The WSGI environ keys that carry the request target as the client sent it.
RAW_URI_KEYS = ("RAW_URI", "REQUEST_URI")

NOT_UTF8 = _("The path is not UTF-8 once percent-decoded.")
ENCODED_SLASH = _(
    "A resource may not contain '/', also not percent-encoded as %2F: the path would "
    "name another lock or another operation."
)


def raw_path(request: HttpRequest) -> bytes | None:
    """The request's path, still percent-encoded, as the client sent it, or
    ``None`` where the server does not pass it on."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):  # ASGI
        raw = scope.get("raw_path")
        return raw.split(b"?", 1)[0] if isinstance(raw, bytes) else None
    for key in RAW_URI_KEYS:
        uri = request.META.get(key)
        if isinstance(uri, str) and uri:
            return _path_of(uri).encode("latin-1", "replace")  # WSGI: bytes as latin-1
    return None


def _path_of(uri: str) -> str:
    """The path of a request target: origin form (``/a?b``) or absolute form
    (``http://host/a?b``)."""
    path = uri.split("?", 1)[0]
    if "://" in path:
        after_scheme = path.split("://", 1)[1]
        path = "/" + after_scheme.split("/", 1)[1] if "/" in after_scheme else "/"
    return path


def path_errors(request: HttpRequest) -> list[str]:
    """Why the path cannot be routed as it stands (empty when it can): it is
    not UTF-8 once percent-decoded, or a segment carries an encoded ``/``.

    With the raw path, that decides. Without it (Django's test client, a WSGI
    server that keeps no raw path), a path that still percent-decodes to bytes
    that are not UTF-8 counts as one that was not UTF-8: Django's re-encoding
    leaves exactly that, so a name with a literal ``%ED%A0%80`` cannot be used
    over HTTP there; and an encoded slash cannot be seen.
    """
    raw = raw_path(request)
    path = raw if raw is not None else request.path_info.encode("utf-8")
    errors = []
    try:
        unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        errors.append(str(NOT_UTF8))
    # unquote decodes once: a segment decodes to one with "/" exactly when it
    # holds %2F (a literal "%2F" in a name travels as %252F).
    if raw is not None and b"%2f" in raw.lower():
        errors.append(str(ENCODED_SLASH))
    return errors


def query_parameters_not_utf8(request: HttpRequest, names: tuple[str, ...]) -> list[str]:
    """Those of the query parameters ``names`` whose values are not UTF-8 once
    percent-decoded (Django would have replaced those bytes with U+FFFD).
    Other parameters are not read, so their bytes do not matter."""
    query = request.META.get("QUERY_STRING", "")
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    bad: list[str] = []
    for name, value in parse_qsl(query, keep_blank_values=True, encoding="latin-1"):
        if name not in names or name in bad:
            continue
        try:
            value.encode("latin-1").decode("utf-8")
        except UnicodeError:
            bad.append(name)
    return bad
