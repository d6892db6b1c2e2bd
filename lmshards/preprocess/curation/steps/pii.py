"""PII: e-mail and public IP addresses replaced by fixed placeholders (FineWeb's anonymization,
Penedo et al. 2024, section 3.5; the patterns of datatrove's PIIFormatter).

`--pii email,ip` picks the kinds. An e-mail address becomes EMAIL_PLACEHOLDER; an IPv4 address that is
globally routable (Python's ipaddress `is_global`: private, loopback, link-local, shared, reserved and
documentation ranges are left alone) becomes IP_PLACEHOLDER. The step never removes a document and
counts replacements per kind; what it replaced is written nowhere. Unlike datatrove, an address is
only matched as a whole dotted number ("1.2.3.4.5" and "1234.5.6.7" hold none), and one placeholder
is used per kind instead of a rotation.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from lmshards.preprocess.curation.steps.base import DOCUMENT, Judgement, Step, StepFlag

EMAIL = "email"
IP = "ip"
KINDS = (EMAIL, IP)
# example.com is reserved for examples (RFC 2606); 192.0.2.0/24 for documentation (RFC 5737), so the
# placeholder is not itself a public address and a second pass leaves it alone.
EMAIL_PLACEHOLDER = "email@example.com"
IP_PLACEHOLDER = "192.0.2.1"

# datatrove's PIIFormatter e-mail pattern (RFC 5322's addr-spec, with IP-literal domains).
_EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
# datatrove's IPv4 pattern, held to whole dotted numbers.
_IPV4 = re.compile(rf"(?<![\d.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\d]|\.\d)")


def parse_kinds(value: str) -> tuple[str, ...]:
    """The kinds in a --pii value ("email,ip"), in KINDS order. Raises ValueError naming a bad one."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    for name in names:
        if name not in KINDS:
            raise ValueError(
                f"--pii {value!r}: {name!r} is not a kind; use a comma-separated list of {', '.join(KINDS)}."
            )
    return tuple(kind for kind in KINDS if kind in names)


def check_options(options: Mapping[str, Any]) -> None:
    """Raises ValueError for a --pii value that names an unknown kind."""
    parse_kinds(options["pii"])


def is_public_ip(address: str) -> bool:
    """Whether a dotted IPv4 address is globally routable."""
    return ipaddress.IPv4Address(address).is_global


def redact(text: str, kinds: Sequence[str]) -> tuple[str, dict[str, int]]:
    """text with each kind's addresses replaced by its placeholder, and the replacements per kind."""
    counts = {}
    if EMAIL in kinds:
        text, counts[EMAIL] = _EMAIL.subn(EMAIL_PLACEHOLDER, text) if "@" in text else (text, 0)
    if IP in kinds:
        public = 0

        def replace(match: re.Match[str]) -> str:
            nonlocal public
            if not is_public_ip(match.group()):
                return match.group()
            public += 1
            return IP_PLACEHOLDER

        text = _IPV4.sub(replace, text)
        counts[IP] = public
    return text, counts


class Pii:
    """The built step: the kinds parsed once."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.kinds = parse_kinds(options["pii"])

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        judgements = []
        for text in texts:
            redacted, counts = redact(text, self.kinds)
            judgements.append(Judgement(redacted, counts=counts))
        return judgements


STEP = Step(
    name="pii",
    kind=DOCUMENT,
    summary="replace e-mail and public IP addresses with fixed placeholders (FineWeb, Penedo et al. "
    "2024); never removes a document",
    reasons=(),
    flags=(
        StepFlag(
            "pii",
            "pii",
            str,
            "",
            f"replace personal data before tokenizing, comma-separated kinds: {EMAIL} (with "
            f"{EMAIL_PLACEHOLDER}), {IP} (public IPv4 addresses, with {IP_PLACEHOLDER})",
        ),
    ),
    build=Pii,
    switch="pii",
    check=check_options,
)
