"""The pages' number formatting (``web/static/js/format.js``, ``decimalFormat``) writes what Chromium's own
``Intl.NumberFormat("en-US", ...)`` writes, which it replaces (a fresh page's first Intl formatter costs tens of
milliseconds before anything shows): on the cases where the two could part (ties, carries into a new digit,
numbers that print in exponent form, -0, infinities) and on random values of every magnitude (fixed seed), for
every pair of fraction digits the pages use."""

from __future__ import annotations

import random

# (minimumFractionDigits, maximumFractionDigits) as the pages ask for them
DIGITS = [(0, 0), (0, 1), (0, 2), (1, 1), (2, 2), (0, 3), (3, 3), (0, 9), (9, 9)]
CASES = [0.0, 1.005, 2.5, -2.5, 0.5, -0.5, 999.995, 9.995, 99999.5, 0.045, 1234.5, -0.004, 0.1 + 0.2, 123456789.987]
CASES += [1e21, 1.5e-7, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308, 12345678901234567890.0, 4.35, 0.0005, 1e15 + 0.3]


def random_values(count: int) -> list[float]:
    rng = random.Random(20261130)
    values = []
    for _ in range(count):
        values.append(rng.choice((-1, 1)) * rng.random() * 10 ** rng.randint(-12, 22))
        values.append(rng.randint(0, 10**7) / 1000 + 0.0005)  # ties at the third decimal, as printed
    return values


COMPARE = """async ([digits, values]) => {
  const { decimalFormat } = await import('/static/js/format.js');
  const differ = [];
  for (const [min, max] of digits) {
    const intl = new Intl.NumberFormat('en-US', { minimumFractionDigits: min, maximumFractionDigits: max });
    const ours = decimalFormat(min, max);
    for (const value of [...values, -0, Infinity, -Infinity, NaN]) {
      const [theirs, mine] = [intl.format(value), ours.format(value)];
      if (theirs !== mine) differ.push([min, max, value, theirs, mine]);
    }
  }
  return { differ: differ.slice(0, 20), compared: digits.length * (values.length + 4) };
}"""


def test_decimal_format_writes_what_intl_writes(page, server) -> None:
    page.goto(f"{server.url}/api-docs")
    values = CASES + [-v for v in CASES] + random_values(5000)
    result = page.evaluate(COMPARE, [DIGITS, values])
    assert result["compared"] == len(DIGITS) * (len(values) + 4)
    assert result["differ"] == []
