"""Hostile input to the lock API: each is a 4xx problem that names what is wrong
and changes nothing, never a 500."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import override_settings

from django_dlock import lock
from django_dlock.models import DistributedLock, ReleaseResult
from django_dlock.validators import validate_label, validate_resource
from tests.api_utils import CheckedClient, client_for, delete, post, problem, send

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> CheckedClient:
    client = client_for(User.objects.create_user("alice"))
    client.raise_request_exception = False  # a 500 must show as a 500, not as a raise
    return client


ROUTES = [
    ("POST", "/api/locks/job"),
    ("POST", "/api/locks/job/renew"),
    ("DELETE", "/api/locks/job"),
]


def invalid(response: Any, field: str) -> dict[str, Any]:
    body = problem(response, 400, "invalid-input")
    assert list(body["errors"]) == [field], body
    return body


# -- 5. every body that does not parse is a 400 -----------------------------------


@pytest.mark.parametrize("method, path", ROUTES)
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_400(api: CheckedClient, method: str, path: str, depth: int) -> None:
    for text in (
        "[" * depth + "]" * depth,
        '{"owner": ' + '{"a": ' * depth + "1" + "}" * depth + "}",
    ):
        response = api.generic(method, path, text, content_type="application/json")
        body = invalid(response, "body")
        assert "nested too deeply" in body["detail"]
    assert not DistributedLock.objects.exists()


@pytest.mark.parametrize(
    "content_type, data",
    [
        ("application/json; charset=utf-16", b'{"owner": "a"}'),  # odd length: not UTF-16
        ("application/json", b'{"ttl": 1' + b"0" * 5000 + b"}"),  # past Python's int digits
        ("application/json", b'{"owner": "a"}\xff'),
        ("application/json", b"\xef\xbb\xbf{}"),  # a UTF-8 byte order mark
    ],
)
def test_every_parse_failure_is_400(api: CheckedClient, content_type: str, data: bytes) -> None:
    for method, path in ROUTES:
        # Django takes bytes; the stubs say str.
        response = api.generic(method, path, data, content_type=content_type)  # type: ignore[arg-type]
        invalid(response, "body")
    assert not DistributedLock.objects.exists()


def test_an_unknown_charset_is_ignored_as_django_does(api: CheckedClient) -> None:
    response = api.generic(
        "POST",
        "/api/locks/job",
        b'{"owner": "a"}',  # type: ignore[arg-type]  # Django takes bytes; the stubs say str
        content_type="application/json; charset=nope",
    )
    assert response.json()["acquired"] is True


# -- 6. bodies over Django's limit are 413 ----------------------------------------


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100)
@pytest.mark.parametrize("method, path", ROUTES)
def test_body_over_data_upload_max_memory_size_is_413(
    api: CheckedClient, method: str, path: str
) -> None:
    response = send(api, method, path, {"owner": "x" * 200})
    body = problem(response, 413, "request-too-large")
    assert "larger" in body["detail"]
    assert not DistributedLock.objects.exists()
    # At the limit it is read.
    exactly = json.dumps({"owner": "o" * (100 - len('{"owner": ""}'))})
    assert len(exactly) == 100
    response = api.generic("POST", "/api/locks/job", exactly, content_type="application/json")
    assert response.status_code == 200


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=None)
def test_no_limit_when_django_sets_none(api: CheckedClient) -> None:
    assert post(api, "/api/locks/job", {"owner": "o", "pad": "x" * 5_000_000}).status_code == 200


# -- 7. paths and queries that are not UTF-8 ---------------------------------------


@pytest.mark.parametrize("segment", ["a%ED%A0%80b", "%FF", "a%C3", "%C0%AF"])
def test_path_that_does_not_decode_as_utf8_is_400(api: CheckedClient, segment: str) -> None:
    path = f"/api/locks/{segment}"
    for response in (
        post(api, path, {"owner": "a"}),
        api.get(path),
        post(api, path + "/renew", {"owner": "a"}),
        delete(api, path, {"owner": "a"}),
    ):
        body = invalid(response, "resource")
        assert "UTF-8" in body["detail"]
    assert not DistributedLock.objects.exists()


def test_utf8_and_literal_percent_signs_still_work(api: CheckedClient) -> None:
    for resource, path in [("ü", "%C3%BC"), ("x%y", "x%25y"), ("100%", "100%25")]:
        assert post(api, f"/api/locks/{path}", {"owner": "o"}).json()["resource"] == resource


def test_query_that_does_not_decode_as_utf8_is_400(api: CheckedClient) -> None:
    body = invalid(api.get("/api/locks?prefix=%FF"), "prefix")
    assert "UTF-8" in body["detail"]
    body = problem(api.get("/api/locks?page_size=%FF&cursor=%FE"), 400, "invalid-input")
    assert set(body["errors"]) == {"page_size", "cursor"}


def test_query_parameters_the_api_does_not_read_are_ignored(api: CheckedClient) -> None:
    assert api.get("/api/locks?utm_source=%FF").status_code == 200


# -- 7b. an encoded "/" never reaches another route --------------------------------------
# Django's test client decodes the path into PATH_INFO, as every WSGI server
# does; the raw path is given as the server would give it. Under real servers:
# test_api_servers.py.


@pytest.mark.parametrize("key", ["RAW_URI", "REQUEST_URI"])
def test_an_encoded_slash_is_400_where_the_raw_path_shows_it(api: CheckedClient, key: str) -> None:
    held = post(api, "/api/locks/R", {"owner": "o", "ttl": 30}).json()
    for method, path in [
        ("POST", "/api/locks/a%2Fb"),
        ("GET", "/api/locks/a%2Fb"),
        ("DELETE", "/api/locks/a%2Fb"),
        ("POST", "/api/locks/R%2Frenew"),  # not a renew of R
        ("POST", "/api/locks/R%2frenew"),
        ("DELETE", "/api/locks/R%2Frenew"),
        ("POST", "/api/locks/a%2F"),
        ("POST", "/api/locks/%2F"),
    ]:
        environ: dict[str, Any] = {key: path}
        response = api.generic(
            method, path, json.dumps({"owner": "o"}), "application/json", **environ
        )
        body = invalid(response, "resource")
        assert "'/'" in body["detail"] and "%2F" in body["detail"], body
    lock = DistributedLock.objects.get(resource="R")
    assert lock.expires_at.isoformat().replace("+00:00", "Z") == held["expires_at"]
    assert list(DistributedLock.objects.values_list("resource", flat=True)) == ["R"]


def test_an_encoded_slash_in_an_absolute_request_target(api: CheckedClient) -> None:
    path = "/api/locks/R%2Frenew"
    uri = f"http://testserver{path}?x=1"
    response = api.generic(
        "POST", path, json.dumps({"owner": "o"}), "application/json", REQUEST_URI=uri
    )
    invalid(response, "resource")


def test_a_literal_percent_2f_in_a_name_is_fine(api: CheckedClient) -> None:
    path = "/api/locks/a%252Fb"  # the name "a%2Fb"
    response = api.generic(
        "POST", path, json.dumps({"owner": "o"}), "application/json", RAW_URI=path
    )
    assert response.json()["resource"] == "a%2Fb"


def test_without_the_raw_path_a_slash_is_a_route_that_does_not_exist(api: CheckedClient) -> None:
    """Django's runserver (wsgiref) passes no raw path: ``a%2Fb`` and ``a/b``
    are the same request there, which no route takes (``R%2Frenew`` would be a
    renew of ``R``: the docs say so)."""
    body = problem(post(api, "/api/locks/a%2Fb", {"owner": "o"}), 404, "not-found")
    assert "'/'" in body["detail"]
    assert not DistributedLock.objects.exists()


# -- 8. look-alike names --------------------------------------------------------------


LOOK_ALIKES = {
    "zero width space": "job:42\u200b",
    "right-to-left override": "\u202ejob:42",
    "byte order mark": "\ufeffjob:42",
    "word joiner": "job\u2060:42",
    "soft hyphen": "jo\u00adb",
    "line separator": "job\u2028",
    "paragraph separator": "job\u2029",
    "next line (C1 control)": "job\x85",
    "no-break space": "job\u00a042",
    "tag character": "job\U000e0041",
    "NFD": unicodedata.normalize("NFD", "café"),
    "Angstrom sign": "\u212b",
}


@pytest.mark.parametrize("name", list(LOOK_ALIKES))
def test_look_alike_names_are_refused_everywhere(api: CheckedClient, name: str) -> None:
    resource = LOOK_ALIKES[name]
    with pytest.raises(ValidationError) as python_error:
        DistributedLock.objects.acquire(resource, owner="o")
    message = python_error.value.messages[0]
    assert message.startswith("A resource")
    path = "/api/locks/%" + resource.encode().hex("%")
    body = invalid(post(api, path, {"owner": "o"}), "resource")
    assert body["errors"]["resource"] == [message]
    body = invalid(api.get("/api/locks", {"prefix": resource}), "prefix")
    assert body["errors"]["prefix"][0].startswith("A prefix")
    assert not DistributedLock.objects.exists()


@pytest.mark.parametrize(
    "resource, why",
    [
        ("job:42\u200b", "invisible formatting characters (U+200B ZERO WIDTH SPACE)"),
        ("\u202ejob", "invisible formatting characters (U+202E RIGHT-TO-LEFT OVERRIDE)"),
        ("a\u2028", "line separators (U+2028 LINE SEPARATOR)"),
        ("a\u2029", "paragraph separators (U+2029 PARAGRAPH SEPARATOR)"),
        ("a\x07", "control characters (U+0007"),
        ("a b", "whitespace (U+0020 SPACE)"),
        ("a/b", "'/'"),
        (unicodedata.normalize("NFD", "café"), "normal form NFC"),
    ],
)
def test_each_message_says_why(resource: str, why: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_resource(resource)
    assert why in error.value.messages[0]


def test_the_nfc_form_and_other_scripts_are_fine(api: CheckedClient) -> None:
    for resource in ("café", "Ångström", "日本語:ジョブ", "emoji-🔒", "ü-ñ", "ko:한국어"):
        assert unicodedata.is_normalized("NFC", resource)
        assert DistributedLock.objects.acquire(resource, owner="o") is not None
        path = "/api/locks/%" + resource.encode().hex("%")
        assert api.get(path).json()["resource"] == resource


# -- 8b. look-alike labels: the label is what operators read --------------------------

# A label may hold spaces ("web-3 pid 4121"), so the no-break space is no look-alike here.
LABEL_LOOK_ALIKES = {name: text for name, text in LOOK_ALIKES.items() if name != "no-break space"}


@pytest.mark.parametrize("name", list(LABEL_LOOK_ALIKES))
def test_look_alike_labels_are_refused_everywhere(api: CheckedClient, name: str) -> None:
    label = LABEL_LOOK_ALIKES[name]
    with pytest.raises(ValidationError) as python_error:
        DistributedLock.objects.acquire("job", owner="o", label=label)
    message = python_error.value.messages[0]
    assert message.startswith("A label")
    with pytest.raises(ValidationError) as lock_error:
        lock("job", label=label)
    assert lock_error.value.messages == [message]
    body = invalid(post(api, "/api/locks/job", {"owner": "o", "label": label}), "label")
    assert body["errors"]["label"] == [message]
    assert not DistributedLock.objects.exists()


def test_a_label_is_checked_by_the_rule_of_names() -> None:
    for text in ("\u202eevil", "job\u200b", unicodedata.normalize("NFD", "café")):
        with pytest.raises(ValidationError) as name_error:
            validate_resource(text)
        with pytest.raises(ValidationError) as label_error:
            validate_label(text)
        assert label_error.value.code == name_error.value.code
        assert label_error.value.messages[0].removeprefix("A label") == (
            name_error.value.messages[0].removeprefix("A resource")
        )


def test_spaces_and_other_scripts_are_fine_in_a_label(api: CheckedClient) -> None:
    # Other scripts are fine, also mixed with Latin ("w\u0435b-1" has a Cyrillic
    # "е"), as in names: docs/usage.md says why.
    for label in ("web-3 pid 4121", "café", "日本語 ジョブ", "w\u0435b-1", "web\u00a01"):
        answer = post(api, "/api/locks/job", {"owner": "o", "label": label})
        assert answer.status_code == 200, answer.content
        assert answer.json()["label"] == label
        assert DistributedLock.objects.release("job", owner="o") == ReleaseResult.RELEASED


# -- 10. page_size: one rule; prefix errors name the prefix ----------------------------


@pytest.mark.parametrize("size", ["0", "1001", "-1", "abc", "1.5", " 5", "99999999999"])
def test_page_size_outside_1_to_1000_is_400(api: CheckedClient, size: str) -> None:
    body = invalid(api.get("/api/locks", {"page_size": size}), "page_size")
    assert "from 1 to 1000" in body["detail"]


@pytest.mark.parametrize("size", ["1", "1000", "0050"])
def test_page_size_inside_the_range(api: CheckedClient, size: str) -> None:
    assert api.get("/api/locks", {"page_size": size}).status_code == 200


@pytest.mark.parametrize("prefix", ["a b", "x" * 256, "a/b", "a\u200b"])
def test_prefix_errors_name_the_prefix(api: CheckedClient, prefix: str) -> None:
    body = invalid(api.get("/api/locks", {"prefix": prefix}), "prefix")
    assert body["errors"]["prefix"][0].startswith("A prefix ")
    assert "resource" not in body["detail"].lower()
