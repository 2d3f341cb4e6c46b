// Number and unit formatting shared by every page.

export const DASH = "\u2014";

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const upTo2 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 2 });
const fixed2 = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const fixed1 = new Intl.NumberFormat("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });

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
  const format = new Intl.NumberFormat("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
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
