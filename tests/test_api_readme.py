"""The HTTP API's page (docs/api.md) runs: its setup snippets in a new project give a working
API with token authentication, and its curl walkthrough, replayed against the example project
on a fresh database, answers exactly as printed there (times and generated owners aside)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("drf_spectacular")

from tests.api_utils import run_in_example_project
from tests.docs_utils import new_project, page, python_blocks, run_in_project, section

pytestmark = pytest.mark.vendor_independent

# Runs in the example project's own process (``client`` is its test client): it parses the
# walkthrough's console block, sends each curl command through Django's test client and prints, per
# command, the page's answer and the real one, as JSON.
REPLAY = textwrap.dedent(
    r"""
    import json, re, shlex
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0)
    tokens = {
        "ADMIN_TOKEN": Token.objects.create(user=User.objects.create_superuser("admin")).key,
        "TOKEN": Token.objects.create(user=User.objects.create_user("worker")).key,
    }
    page = open("docs/api.md").read()
    section = page[page.index("## Try it with curl"):]
    block = re.search(r"```console\n(.*?)```", section, re.S).group(1)
    results = []
    for chunk in block.strip().split("\n\n$ "):
        command, _, expected = chunk.removeprefix("$ ").partition("\n")
        args = shlex.split(command.replace("$ADMIN_TOKEN", tokens["ADMIN_TOKEN"]).replace("$TOKEN", tokens["TOKEN"]))
        method, headers, data, url, head, code_only = "GET", {}, None, None, False, False
        i = 1
        while i < len(args):
            arg = args[i]
            if arg == "-X":
                method, i = args[i + 1], i + 1
            elif arg == "-H":
                name, _, value = args[i + 1].partition(": ")
                headers[name], i = value, i + 1
            elif arg == "-d":
                data, i = args[i + 1], i + 1
            elif arg in ("-o", "-w"):
                code_only, i = True, i + 1
            elif arg == "-i":
                head = True
            elif arg.startswith("http"):
                url = arg.removeprefix("http://127.0.0.1:8000")
            i += 1
        extra = {"HTTP_AUTHORIZATION": headers["Authorization"]} if "Authorization" in headers else {}
        kwargs = {"content_type": headers.get("Content-Type", "application/octet-stream")}
        response = client.generic(method, url, data or "", **kwargs, **extra)
        if code_only:
            actual = str(response.status_code)
        else:
            lines = []
            if head:
                lines.append(f"HTTP/1.1 {response.status_code} {response.reason_phrase}")
                for name in ("Content-Type", "Retry-After", "WWW-Authenticate"):
                    if name in response:
                        lines.append(f"{name}: {response[name]}")
                lines.append("")
            lines.append(response.content.decode())
            actual = "\n".join(lines)
        results.append({"command": command, "expected": expected.strip(), "actual": actual.strip()})
    print(json.dumps(results))
    """
)


def masked(text: str) -> str:
    """Times and generated owners differ from run to run; the rest must not."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<time>", text)
    text = re.sub(r'"owner":"[0-9a-f]{32}"', '"owner":"<generated>"', text)
    return re.sub(r"Retry-After: (29|30)\b", "Retry-After: <30 s>", text)


def test_curl_walkthrough_matches_a_fresh_database(tmp_path: Path) -> None:
    output = run_in_example_project(
        REPLAY, DATABASE_URL=f"sqlite:///{tmp_path / 'example.sqlite3'}"
    )
    steps = json.loads(output.strip().splitlines()[-1])
    assert len(steps) >= 10
    for step in steps:
        assert masked(step["actual"]) == masked(step["expected"]), step["command"]


# -- the setup, in a new project ----------------------------------------------------------------

EXERCISE = """
    import json
    from io import StringIO
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    call_command("check", fail_level="WARNING")
    User.objects.create_user("alice")
    out = StringIO()
    call_command("drf_create_token", "alice", stdout=out)
    token = out.getvalue().split()[2]
    anonymous = Client().get("/api/locks")
    acquired = Client().post(
        "/api/locks/job:42", "{}", content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
    )
    print(json.dumps({
        "anonymous": [anonymous.status_code, anonymous.get("WWW-Authenticate")],
        "acquired": [acquired.status_code, acquired.json().get("acquired")],
    }))
"""


def setup_snippets() -> tuple[str, str]:
    """The settings.py and urls.py blocks of docs/api.md's "Set up", in a project that has
    followed the quickstart's database settings."""
    blocks = python_blocks(section(page("api.md"), "## Set up"))
    [settings] = [block for block in blocks if block.startswith("# settings.py\n")]
    [urls] = [block for block in blocks if block.startswith("# urls.py\n")]
    [quickstart, *_] = python_blocks(section(page("README.md"), "## Quickstart"))
    database = quickstart[quickstart.index("DATABASES = ") :]
    return database + settings, urls


def test_the_setup_gives_a_working_api_in_a_new_project(tmp_path: Path) -> None:
    """`startproject`, the page's settings and URLconf, `migrate`, `drf_create_token`: anonymous
    calls get 401 with a Token challenge, and the token acquires a lock."""
    settings, urls = setup_snippets()
    project = new_project(tmp_path, settings=settings, urls=urls)
    answers = json.loads(run_in_project(project, EXERCISE).strip().splitlines()[-1])
    assert answers == {"anonymous": [401, "Token"], "acquired": [200, True]}


def test_without_the_authentication_setting_anonymous_calls_get_403(tmp_path: Path) -> None:
    """What the page says of DRF's default authentication (session first, no challenge)."""
    settings, urls = setup_snippets()
    defaults = settings[: settings.index("REST_FRAMEWORK = ")]
    project = new_project(tmp_path, settings=defaults, urls=urls)
    answers = json.loads(run_in_project(project, EXERCISE).strip().splitlines()[-1])
    assert answers["anonymous"] == [403, None]
