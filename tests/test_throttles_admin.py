"""The admin's read-only list of throttle keys, by the database's clock."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.timezone import localtime

from django_dlock import throttle
from django_dlock.models import ThrottleSlot
from tests.throttle_utils import used_ago

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_dlock_throttlekey_changelist")


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def rows(html: str) -> list[list[str]]:
    """The text of each cell of each row of the list."""
    body = html.split('id="result_list"', 1)[1].split("</table>", 1)[0]
    return [
        [text(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)[1:]  # after the header
    ]


def test_each_key_once_with_its_rate_uses_and_next_use(admin_client: Client) -> None:
    for _ in range(3):
        throttle("email:1", rate="3/m").try_use()
    throttle("email:2", rate="3/m").try_use()
    used_ago("email:1", [40, 30, 20])

    listed = rows(admin_client.get(CHANGELIST).content.decode())

    assert [row[0] for row in listed] == ["email:1", "email:2"]
    assert [row[1:3] for row in listed] == [["3/m", "3"], ["3/m", "1"]]
    # email:1 is full until its use of 40 s ago leaves the window, in 20 s.
    assert listed[0][4] in ("in 19 s", "in 20 s")
    assert listed[1][4] == "now"


def test_the_list_costs_the_same_queries_for_any_number_of_keys(admin_client: Client) -> None:
    throttle("email:0", rate="1/m").try_use()
    with CaptureQueriesContext(connection) as one:
        admin_client.get(CHANGELIST)
    for n in range(1, 6):
        throttle(f"email:{n}", rate="1/m").try_use()
    with CaptureQueriesContext(connection) as six:
        admin_client.get(CHANGELIST)
    assert len(six.captured_queries) == len(one.captured_queries)


def test_no_add_no_edit_no_delete(admin_client: Client) -> None:
    throttle("email:1", rate="1/m").try_use()
    key = ThrottleSlot.objects.get(key="email:1", slot=0)
    assert admin_client.get(reverse("admin:django_dlock_throttlekey_add")).status_code == 403
    change = reverse("admin:django_dlock_throttlekey_change", args=[key.pk])
    assert admin_client.post(change, {"key": "email:9"}).status_code == 403
    delete = reverse("admin:django_dlock_throttlekey_delete", args=[key.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert ThrottleSlot.objects.get(pk=key.pk).key == "email:1"


def test_a_keys_page_shows_the_key_as_the_list_does(admin_client: Client) -> None:
    for _ in range(3):
        throttle("email:1", rate="3/m").try_use()
    used_ago("email:1", [40, 30, 20])
    key = ThrottleSlot.objects.get(key="email:1", slot=0)
    last_used = ThrottleSlot.objects.filter(key="email:1").order_by("-used_at")[0].used_at
    assert last_used is not None

    page = admin_client.get(reverse("admin:django_dlock_throttlekey_change", args=[key.pk]))

    fields = {
        line.field["label"]: text(str(line.contents()))
        for fieldset in page.context["adminform"]
        for fieldline in fieldset
        for line in fieldline
    }
    assert fields.pop("next use allowed") in ("in 19 s", "in 20 s")
    assert fields == {
        "key": "email:1",
        "rate": "3/m",
        "uses in the window": "3",
        "last use": f"{localtime(last_used):%Y-%m-%d %H:%M:%S}",
    }
    html = page.content.decode()
    assert "#0" not in html  # the key, not its first row
