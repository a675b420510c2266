"""The README documents what the code has."""

from __future__ import annotations

import re
from pathlib import Path

from django_dlock.conf import Settings

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    settings = [name for name, value in vars(Settings).items() if isinstance(value, property)]
    assert settings
    for name in settings:
        assert f"### `DLOCK_{name}`" in README, f"DLOCK_{name} has no section in README"


def test_readme_starts_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = first_block.group(1)
    assert "scripts/example.sh" in commands and "scripts/test.sh" in commands
    assert README.index("```sh") < README.index("## ")
