"""Integrations with other libraries; each module imports its library."""

from __future__ import annotations
