"""The README's curl walkthrough, replayed against the example project on a fresh
database: every answer matches the one printed there (times and generated
owners aside)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("drf_spectacular")

from tests.api_utils import run_in_example_project

ROOT = Path(__file__).resolve().parent.parent

# Runs in the example project's own process (``client`` is its test client): it parses the README's console
# block, sends each curl command through Django's test client and prints, per
# command, the README's answer and the real one, as JSON.
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
    readme = open("README.md").read()
    section = readme[readme.index("### Try it with curl"):]
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
