"""The throttles page's and the throttle recipe's examples run as written."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import RequestFactory

from django_dlock import Throttled
from tests.docs_utils import run_example

pytestmark = pytest.mark.django_db


def test_the_context_manager_example_sends_ten_and_then_says_when() -> None:
    sent: list[int] = []
    send = run_example("throttle", deliver_reset_email=sent.append, logger=logging.getLogger("t"))[
        "send_reset_email"
    ]
    assert [send(7) for _ in range(11)] == [True] * 10 + [False]
    assert sent == [7] * 10


def test_try_use_sends_one_digest_a_day() -> None:
    sent: list[int] = []
    maybe_send_digest = run_example("try_use", send_digest=sent.append)["maybe_send_digest"]
    for _ in range(3):
        maybe_send_digest(1)
    maybe_send_digest(2)
    assert sent == [1, 2]


def test_the_decorated_function_counts_per_phone() -> None:
    gateway = SimpleNamespace(sent=[])
    gateway.send = lambda phone, code: gateway.sent.append(phone)
    send_code = run_example("throttled function", sms_gateway=gateway)["send_code"]
    for _ in range(3):
        send_code("+100", "1234")
    with pytest.raises(Throttled):
        send_code("+100", "1234")
    send_code("+200", "1234")
    assert gateway.sent == ["+100"] * 3 + ["+200"]


def test_the_recipe_answers_429_with_retry_after_from_the_eleventh_message() -> None:
    delivered: list[Any] = []
    namespace = run_example("emails per user", deliver=lambda *args: delivered.append(args))
    view = namespace["contact_support"]

    def post() -> Any:
        request = RequestFactory().post("/contact", {"message": "help"})
        request.user = SimpleNamespace(pk=7)  # type: ignore[assignment]
        return view(request)

    answers = [post() for _ in range(11)]
    assert [answer.status_code for answer in answers] == [200] * 10 + [429]
    assert 1 <= int(answers[-1]["Retry-After"]) <= 60
    assert len(delivered) == 10
