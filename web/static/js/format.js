// Number and unit formatting shared by every page.

export const DASH = "\u2014";

const SHORTEST = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/;

/**
 * What `new Intl.NumberFormat("en-US", { minimumFractionDigits, maximumFractionDigits })` formats, made without
 * Intl: a fresh page's first Intl formatter takes 20-90 ms of its main thread before anything shows
 * (bench/RESULTS.md, run 25). The same text: thousands grouped with ",", the shortest decimal that reads back as
 * the value rounded half away from zero, "-" on every negative value (and -0), "∞". (Checked against Intl on
 * every case and on random values: tests/browser/test_number_format.py.)
 */
export function decimalFormat(minimumFractionDigits, maximumFractionDigits) {
  return { format: (value) => formatDecimal(Number(value), minimumFractionDigits, maximumFractionDigits) };
}

function formatDecimal(value, minDigits, maxDigits) {
  if (Number.isNaN(value)) return "NaN";
  const sign = value < 0 || Object.is(value, -0) ? "-" : "";
  if (!Number.isFinite(value)) return `${sign}\u221e`;
  const [, whole, fraction = "", exponent = "0"] = SHORTEST.exec(String(Math.abs(value)));
  let digits = whole + fraction; // the value is 0.digits x 10^point
  let point = whole.length + Number(exponent);
  if (point < 0) {
    digits = "0".repeat(-point) + digits;
    point = 0;
  }
  digits = digits.padEnd(point, "0");
  const kept = digits.slice(0, point + maxDigits).padEnd(point + maxDigits, "0");
  let rounded = kept;
  if ((digits[point + maxDigits] || "0") >= "5") {
    // add one unit in the last kept place, carrying
    const units = kept.split("");
    let i = units.length - 1;
    while (i >= 0 && units[i] === "9") units[i--] = "0";
    if (i >= 0) units[i] = String(Number(units[i]) + 1);
    rounded = (i < 0 ? "1" : "") + units.join("");
    point += i < 0 ? 1 : 0;
  }
  let integerPart = rounded.slice(0, point).replace(/^0+(?=\d)/, "") || "0";
  let fractionPart = rounded.slice(point);
  while (fractionPart.length > minDigits && fractionPart.endsWith("0")) fractionPart = fractionPart.slice(0, -1);
  integerPart = integerPart.replace(/\B(?=(\d{3})+$)/g, ",");
  return sign + integerPart + (fractionPart ? `.${fractionPart}` : "");
}

const integer = decimalFormat(0, 0);
const upTo2 = decimalFormat(0, 2);
const fixed2 = decimalFormat(2, 2);
const fixed1 = decimalFormat(1, 1);

const missing = (value) => value === null || value === undefined || Number.isNaN(value);

/** Microseconds: thousands separators; sub-1000 values keep up to 2 decimals. */
export function fmtUs(value) {
  if (missing(value)) return DASH;
  return Math.abs(value) >= 1000 ? integer.format(value) : upTo2.format(value);
}

/**
 * A formatter for one column of µs values: every cell gets the same number of decimals, chosen by the
 * column's largest value (0 from 1,000 µs, 1 from 10 µs, else 2), so a column never mixes "3,762" and "493.91".
 */
export function fmtUsColumn(values) {
  const largest = Math.max(0, ...values.filter((v) => !missing(v)).map(Math.abs));
  const digits = largest >= 1000 ? 0 : largest >= 10 ? 1 : 2;
  const format = decimalFormat(digits, digits);
  return (value) => (missing(value) ? DASH : format.format(value));
}

export function fmtInt(value) {
  return missing(value) ? DASH : integer.format(value);
}

/** A percentage with 2 decimals, e.g. 12.34 (no % sign: columns say "%"). */
export function fmtPct(value) {
  return missing(value) ? DASH : fixed2.format(value);
}

export function fmtPctSign(value, digits = 1) {
  if (missing(value)) return DASH;
  return `${(digits === 2 ? fixed2 : fixed1).format(value)}%`;
}

export function fmtFixed2(value) {
  return missing(value) ? DASH : fixed2.format(value);
}

export function fmtBool(value) {
  if (missing(value)) return DASH;
  return value ? "Yes" : "No";
}

/** [x, y, z] -> "x,y,z" */
export function fmtDim(value) {
  if (missing(value)) return DASH;
  return Array.isArray(value) ? value.join(",") : String(value);
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** Human byte counts in powers of 1024 with binary prefixes (KiB, MiB, GiB): the one unit convention of every page. */
export function fmtBytes(bytes) {
  if (missing(bytes)) return DASH;
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const text = unit === 0 ? integer.format(value) : value >= 100 ? integer.format(value) : fixed1.format(value);
  return `${text} ${BYTE_UNITS[unit]}`;
}

export function fmtGiB(bytes) {
  return missing(bytes) ? DASH : `${fixed2.format(bytes / 1024 ** 3)} GiB`;
}

/** A unit for a time axis so that the largest value reads well: µs, ms or s. */
export function timeUnit(maxUs) {
  if (maxUs >= 1e6) return { divisor: 1e6, label: "s" };
  if (maxUs >= 1e4) return { divisor: 1e3, label: "ms" };
  return { divisor: 1, label: "\u00b5s" };
}

/** A duration in µs with an adaptive unit, e.g. "177.6 ms". */
export function fmtDuration(us) {
  if (missing(us)) return DASH;
  const unit = timeUnit(Math.abs(us));
  const value = us / unit.divisor;
  return `${upTo2.format(value)} ${unit.label}`;
}
