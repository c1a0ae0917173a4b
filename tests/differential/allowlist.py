"""Where Samsa differs from Apache Kafka on purpose: test name -> why (a GAPS.md line or a design choice).

An entry whose scenario turns out equal fails, so the list stays true."""

ALLOW: dict[str, str] = {
}

# Differences that are Samsa bugs not fixed yet: the scenario runs and is expected to fail (strict
# xfail, so a fix shows up as XPASS and the entry must go). Each one is a bug to fix, not a choice.
KNOWN: dict[str, str] = {
}
