"""PII replacement (lmshards/preprocess/curation/steps/pii.py): e-mail and public IPv4 addresses,
their placeholders and counts; private ranges and longer dotted numbers left alone."""

from __future__ import annotations

import pytest

from lmshards.preprocess.curation.steps import pii
from lmshards.preprocess.curation.steps.base import Judgement

BOTH = ("email", "ip")


def test_emails_and_public_ips_become_the_placeholders_and_are_counted():
    text = "Mail jane.doe+news@mail.example.co.uk or bob@[10.0.0.1]; the mirror is 84.12.33.7."
    assert pii.redact(text, BOTH) == (
        "Mail email@example.com or email@example.com; the mirror is 192.0.2.1.",
        {"email": 2, "ip": 1},
    )


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "127.0.0.1",
        "169.254.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "192.0.2.44",
        "255.255.255.255",
    ],
)
def test_private_and_reserved_addresses_stay(address):
    assert pii.redact(f"host {address} up", BOTH) == (f"host {address} up", {"email": 0, "ip": 0})


@pytest.mark.parametrize(
    "text", ["version 1.2.3.4.5", "build 1234.5.6.7", "v8.8.8.8.1 x", "8.8.8.256"]
)
def test_only_whole_dotted_quads_are_addresses(text):
    assert pii.redact(text, ("ip",)) == (text, {"ip": 0})


def test_an_address_ending_a_sentence_is_still_one():
    assert pii.redact("Ping 8.8.8.8. Then 1.1.1.1, done", ("ip",)) == (
        "Ping 192.0.2.1. Then 192.0.2.1, done",
        {"ip": 2},
    )


def test_a_second_pass_changes_nothing_and_kinds_are_separate():
    once, _ = pii.redact("a@b.org 8.8.4.4", BOTH)
    assert pii.redact(once, ("ip",)) == (once, {"ip": 0})
    assert pii.redact("a@b.org 8.8.4.4", ("email",)) == ("email@example.com 8.8.4.4", {"email": 1})


def test_the_step_never_removes_and_writes_no_address_anywhere():
    step = pii.STEP.build({"pii": "ip, email"})
    judgements = step.judge(["x a@b.org", "nothing here"])
    assert judgements == [
        Judgement("x email@example.com", counts={"email": 1, "ip": 0}),
        Judgement("nothing here", counts={"email": 0, "ip": 0}),
    ]
    assert all(j.reason == "" and j.detail == "" for j in judgements)
    assert pii.STEP.reasons == () and pii.STEP.switch == "pii"


def test_a_bad_kind_is_named_with_the_fix():
    assert pii.parse_kinds("ip,email") == ("email", "ip")
    with pytest.raises(
        ValueError,
        match=r"--pii 'email,phone': 'phone' is not a kind; use a comma-separated list of email, ip",
    ):
        pii.STEP.check({"pii": "email,phone"})
