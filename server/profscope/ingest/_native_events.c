/* Decode a piece of a Chrome trace's event array straight into columns, without a Python object per event.
 *
 * profscope.ingest.native_events is the only caller. decode(piece) takes the bytes "[e1, e2, ...]" the
 * reader cut and returns, in one pass:
 *   - one fixed-size row (struct Row) per complete ("X") event: times, ids and every args value the
 *     parser reads, strings as ids into small per-piece tables (first occurrence first);
 *   - one row per flow event ("s", "t", "f") and per "[memory]" instant, with their own tables;
 *   - the other events ("M", "i", "C", "B", ...) copied out as a JSON array, for the Python parser,
 *     which stays the reference for every rare case;
 *   - the args of events carrying collective args, also for the Python parser.
 * It returns None whenever the piece holds anything it does not handle exactly as msgspec and the
 * Python parser would (a non-object item, a value of an unexpected type, an escaped key, a number it
 * cannot convert exactly, malformed JSON...): the caller then decodes the whole piece in Python, so the
 * result never depends on this file's coverage, only its speed does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_ABS_TS_US 4e15 /* kineto.MAX_ABS_TS_US */
#define MAX_DUR_US 1e15    /* kineto.MAX_DUR_US */

#define NO_ID (-1)
#define MAX_DEPTH 512
#define MAX_SAFE_DIGITS 18 /* integers with more digits are left to Python (range checks, big ints) */

typedef struct {
    double ts, dur, blocks_per_sm, occupancy;
    int64_t external_id, correlation, sequence_number, fwd_thread, device, stream;
    int64_t registers_per_thread, shared_memory, bytes, python_id, python_parent_id, python_module_id;
    int32_t name, cat, track, input_dims, input_types, call_stack, grid, block;
    int8_t has_op_args;
} Row;

typedef struct { /* a "[memory]" instant event: an allocation or free */
    double ts;
    int64_t addr, bytes, total_allocated, total_reserved, device_type, device_id;
    int32_t track;
} MemoryRow;

typedef struct { /* a flow event: ph "s", "t" or "f" */
    double ts;
    int64_t id;
    int32_t cat, track;
    int8_t phase, binds_enclosing;
} FlowRow;

enum { OK = 0, UNSUPPORTED = 1, NO_MEMORY = 2 };

/* ---- growable byte buffer ------------------------------------------------------------------------- */
typedef struct {
    char *data;
    size_t len, cap;
} Buffer;

static int buffer_append(Buffer *buffer, const void *bytes, size_t n) {
    if (buffer->len + n > buffer->cap) {
        size_t cap = buffer->cap ? buffer->cap : 4096;
        while (cap < buffer->len + n) cap *= 2;
        char *data = realloc(buffer->data, cap);
        if (data == NULL) return NO_MEMORY;
        buffer->data = data;
        buffer->cap = cap;
    }
    memcpy(buffer->data + buffer->len, bytes, n);
    buffer->len += n;
    return OK;
}

/* ---- interning tables: spans of the piece -> dense local ids, with their Python values ------------- */
typedef enum { VALUE_STRING, VALUE_BYTES, VALUE_TRACK } ValueKind;

typedef struct {
    const unsigned char *a, *b; /* key: one span (b == NULL) or a pair of spans (a track's pid and tid) */
    Py_ssize_t na, nb;
    uint64_t hash;
    int32_t id;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    Py_ssize_t count;
    ValueKind kind;
    PyObject *values; /* list, index = local id */
    Slot last; /* the key asked last (id -1: none): most events repeat their neighbour's category, track... */
} SpanTable;

static uint64_t hash_span(const unsigned char *p, Py_ssize_t n, uint64_t h) {
    h ^= (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, (size_t)n);
    h = (h ^ tail) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

static int table_init(SpanTable *table, ValueKind kind) {
    table->mask = 255;
    table->count = 0;
    table->kind = kind;
    table->last.id = -1;
    table->slots = calloc(table->mask + 1, sizeof(Slot));
    table->values = PyList_New(0);
    return (table->slots == NULL || table->values == NULL) ? NO_MEMORY : OK;
}

static void table_free(SpanTable *table) {
    free(table->slots);
    Py_XDECREF(table->values);
}

static int table_grow(SpanTable *table) {
    size_t mask = table->mask * 2 + 1;
    Slot *slots = calloc(mask + 1, sizeof(Slot));
    if (slots == NULL) return NO_MEMORY;
    for (size_t i = 0; i <= table->mask; i++) {
        Slot *old = &table->slots[i];
        if (old->a == NULL) continue;
        size_t j = old->hash & mask;
        while (slots[j].a != NULL) j = (j + 1) & mask;
        slots[j] = *old;
    }
    free(table->slots);
    table->slots = slots;
    table->mask = mask;
    return OK;
}

static PyObject *json_string_value(const unsigned char *s, Py_ssize_t n);
static PyObject *track_part_value(const unsigned char *s, Py_ssize_t n);

static PyObject *make_value(SpanTable *table, const Slot *slot) {
    switch (table->kind) {
        case VALUE_STRING:
            return json_string_value(slot->a, slot->na);
        case VALUE_BYTES:
            return PyBytes_FromStringAndSize((const char *)slot->a, slot->na);
        case VALUE_TRACK: {
            PyObject *pid = track_part_value(slot->a, slot->na);
            PyObject *tid = pid ? track_part_value(slot->b, slot->nb) : NULL;
            PyObject *pair = tid ? PyTuple_Pack(2, pid, tid) : NULL;
            Py_XDECREF(pid);
            Py_XDECREF(tid);
            return pair;
        }
    }
    return NULL;
}

/* The local id of a key, interning it (and making its Python value) on first sight. -1: a Python error. */
static int32_t table_id(SpanTable *table, const unsigned char *a, Py_ssize_t na, const unsigned char *b,
                        Py_ssize_t nb) {
    static const unsigned char empty[1] = {0};
    if (a == NULL) a = empty; /* a NULL first span marks an empty slot */
    Slot *last = &table->last;
    if (last->id >= 0 && last->na == na && last->nb == nb && memcmp(last->a, a, (size_t)na) == 0 &&
        (b == NULL || memcmp(last->b, b, (size_t)nb) == 0))
        return last->id;
    uint64_t hash = hash_span(a, na, b ? hash_span(b, nb, 0x12345) : 0);
    size_t i = hash & table->mask;
    for (;;) {
        Slot *slot = &table->slots[i];
        if (slot->a == NULL) break;
        if (slot->hash == hash && slot->na == na && slot->nb == nb && memcmp(slot->a, a, (size_t)na) == 0 &&
            (b == NULL || memcmp(slot->b, b, (size_t)nb) == 0)) {
            *last = *slot;
            return slot->id;
        }
        i = (i + 1) & table->mask;
    }
    Slot *slot = &table->slots[i];
    slot->a = a;
    slot->na = na;
    slot->b = b;
    slot->nb = nb;
    slot->hash = hash;
    slot->id = (int32_t)table->count;
    PyObject *value = make_value(table, slot);
    if (value == NULL || PyList_Append(table->values, value) < 0) {
        Py_XDECREF(value);
        slot->a = NULL;
        return -1;
    }
    Py_DECREF(value);
    int32_t id = slot->id; /* growing frees the slots */
    *last = *slot;
    table->count++;
    if ((size_t)table->count * 2 > table->mask && table_grow(table) != OK) {
        PyErr_NoMemory();
        return -1;
    }
    return id;
}

/* ---- JSON scanning ------------------------------------------------------------------------------------ */
typedef struct {
    const unsigned char *p, *end;
} Cursor;

static inline int is_whitespace(unsigned char ch) {
    return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
}

static void skip_whitespace_run(Cursor *c) {
    while (c->p < c->end && is_whitespace(*c->p)) c->p++;
}

/* Most whitespace is the one space after a ':' or a ',': that case costs one comparison more. */
static inline void skip_whitespace(Cursor *c) {
    const unsigned char *p = c->p;
    if (p < c->end && *p <= ' ') {
        if (*p == ' ' && p + 1 < c->end && p[1] > ' ') {
            c->p = p + 1;
            return;
        }
        skip_whitespace_run(c);
    }
}

static inline int expect(Cursor *c, unsigned char ch) {
    skip_whitespace(c);
    if (c->p >= c->end || *c->p != ch) return UNSUPPORTED;
    c->p++;
    skip_whitespace(c);
    return OK;
}

/* Length of one valid UTF-8 sequence (RFC 3629: no overlong forms, no surrogates), 0 if invalid. */
static int utf8_sequence(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        return (end - p >= 3 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        return (end - p >= 4 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) ? 4
                                                                                                           : 0;
    }
    return 0;
}

static inline int hex_digit(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *p) {
    int value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_digit(p[i]);
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* The first byte at or after p that is a quote, a backslash, a control character or not ASCII. */
static inline const unsigned char *plain_ascii_end(const unsigned char *p, const unsigned char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        /* signed comparison: bytes >= 0x80 are negative, so "< 0x20" catches them too */
        __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                       _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(special);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
    return p;
}

typedef struct {
    const unsigned char *s; /* the characters between the quotes, as written */
    Py_ssize_t n;
    int escaped;
} Span;

/* A string at c->p (its opening quote). Control characters, bad escapes, invalid UTF-8 and lone
 * surrogates are left to Python. */
static int scan_string(Cursor *c, Span *out) {
    const unsigned char *p = c->p + 1, *end = c->end;
    out->s = p;
    out->escaped = 0;
    for (;;) {
        p = plain_ascii_end(p, end);
        if (p >= end) return UNSUPPORTED;
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch == '\\') {
            out->escaped = 1;
            if (end - p < 2) return UNSUPPORTED;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return UNSUPPORTED;
                int unit = hex4(p + 2);
                if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return UNSUPPORTED;
                p += 6;
                if (unit >= 0xD800 && unit <= 0xDBFF) { /* must be followed by its low surrogate */
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return UNSUPPORTED;
                    int low = hex4(p + 2);
                    if (low < 0xDC00 || low > 0xDFFF) return UNSUPPORTED;
                    p += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                return UNSUPPORTED;
            }
            continue;
        }
        if (ch < 0x20) return UNSUPPORTED;
        int len = utf8_sequence(p, end);
        if (len == 0) return UNSUPPORTED;
        p += len;
    }
    out->n = p - out->s;
    c->p = p + 1;
    return OK;
}

static void put_utf8(unsigned char **out, uint32_t cp) {
    unsigned char *o = *out;
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | (cp >> 12));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | (cp >> 18));
        *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *out = o;
}

/* The str of a string's characters (already validated by scan_string). */
static PyObject *json_string_value(const unsigned char *s, Py_ssize_t n) {
    if (memchr(s, '\\', (size_t)n) == NULL) return PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    unsigned char *decoded = malloc((size_t)n + 1), *o = decoded;
    if (decoded == NULL) return PyErr_NoMemory();
    const unsigned char *p = s, *end = s + n;
    while (p < end) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        unsigned char e = p[1];
        p += 2;
        switch (e) {
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                uint32_t cp = (uint32_t)hex4(p);
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)hex4(p + 2) - 0xDC00);
                    p += 6;
                }
                put_utf8(&o, cp);
                break;
            }
            default: *o++ = e; /* " \ / */
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)decoded, o - decoded, "strict");
    free(decoded);
    return text;
}

/* A pid or tid as msgspec gives it: a str (the span includes its quotes) or an int. */
static PyObject *track_part_value(const unsigned char *s, Py_ssize_t n) {
    if (n >= 2 && s[0] == '"') return json_string_value(s + 1, n - 2);
    char digits[32];
    memcpy(digits, s, (size_t)n);
    digits[n] = '\0';
    return PyLong_FromString(digits, NULL, 10);
}

typedef enum { NUMBER_INT, NUMBER_FLOAT, NUMBER_UNSAFE } NumberKind;

typedef struct {
    NumberKind kind; /* NUMBER_UNSAFE: valid JSON, but an int too big for the int64 columns */
    int64_t i;
    double d; /* the value as a float (ints too), as Python's float() would give it */
} Number;

static const double POWERS_OF_TEN[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static const uint64_t DIGIT_POWERS[] = {1,      10,      100,      1000,      10000,
                                       100000, 1000000, 10000000, 100000000};

/* The end of the digits at p, accumulated into *mantissa (modulo 2^64, exactly as digit by digit):
 * up to 8 digits at once (SWAR, little-endian), where 8 bytes can be read. */
static inline const unsigned char *scan_digits(const unsigned char *p, const unsigned char *end,
                                               uint64_t *mantissa) {
    uint64_t m = *mantissa;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        /* per byte: high nibble 3, and still 3 after adding 6 (a carry out of a byte only reaches bytes
         * after a non-digit, which do not count) */
        uint64_t odd = ((v & 0xF0F0F0F0F0F0F0F0ULL) | (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) ^
                       0x3333333333333333ULL;
        int count = odd ? __builtin_ctzll(odd) >> 3 : 8; /* leading digits */
        if (count == 0) break;
        v = (v & 0x0F0F0F0F0F0F0F0FULL) << (8 * (8 - count)); /* the digits, after as many leading zeros */
        v = v * 10 + (v >> 8);
        v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
             (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
            32;
        m = m * DIGIT_POWERS[count] + v;
        p += count;
        if (count < 8) {
            *mantissa = m;
            return p;
        }
    }
#endif
    for (; p < end && *p >= '0' && *p <= '9'; p++) m = m * 10 + (uint64_t)(*p - '0');
    *mantissa = m;
    return p;
}

static int scan_number(Cursor *c, Number *out) {
    const unsigned char *p = c->p, *end = c->end, *start = p;
    int negative = 0, digits = 0, fraction_digits = 0, is_float = 0, exponent = 0;
    uint64_t mantissa = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return UNSUPPORTED;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return UNSUPPORTED; /* leading zero */
    const unsigned char *first = p;
    p = scan_digits(p, end, &mantissa);
    digits = (int)(p - first);
    int integer_digits = digits;
    if (p < end && *p == '.') {
        is_float = 1;
        p++;
        first = p;
        p = scan_digits(p, end, &mantissa);
        if (p == first) return UNSUPPORTED;
        fraction_digits = (int)(p - first);
        digits += fraction_digits;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_float = 1;
        p++;
        int exponent_negative = 0;
        if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
        first = p;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (exponent < 100000) exponent = exponent * 10 + (*p - '0');
        if (p == first) return UNSUPPORTED;
        if (exponent_negative) exponent = -exponent;
    }
    c->p = p;
    if (!is_float) {
        if (integer_digits > MAX_SAFE_DIGITS) {
            out->kind = NUMBER_UNSAFE;
            return OK;
        }
        out->kind = NUMBER_INT;
        out->i = negative ? -(int64_t)mantissa : (int64_t)mantissa;
        out->d = (double)out->i;
        return OK;
    }
    out->kind = NUMBER_FLOAT;
    int power = exponent - fraction_digits;
    if (digits <= 19 && mantissa <= (1ULL << 53) && power >= -22 && power <= 22) {
        /* Clinger's fast path: both operands exact, one correctly rounded operation */
        double value = (double)mantissa;
        value = power < 0 ? value / POWERS_OF_TEN[-power] : value * POWERS_OF_TEN[power];
        out->d = negative ? -value : value;
        return OK;
    }
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
    if (digits <= 19 && power >= -27 && power <= 27) {
        /* x87 extended precision holds the mantissa and 10^|power| exactly, so the quotient or product
         * is rounded once to 64 bits; rounding that to a double is then exact unless it lands on a
         * midpoint between two doubles (low 11 bits 0x400), which is left to the slow path. */
        static const long double TENS[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
                                           1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
                                           1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
        long double value = (long double)mantissa;
        value = power < 0 ? value / TENS[-power] : value * TENS[power];
        uint64_t significand;
        memcpy(&significand, &value, sizeof(significand));
        if (mantissa == 0 || (significand & 0x7FF) != 0x400) {
            out->d = negative ? -(double)value : (double)value;
            return OK;
        }
    }
#endif
    char short_text[64], *text = short_text;
    size_t length = (size_t)(p - start);
    if (length >= sizeof(short_text) && (text = malloc(length + 1)) == NULL) return UNSUPPORTED;
    memcpy(text, start, length);
    text[length] = '\0';
    out->d = PyOS_string_to_double(text, NULL, NULL); /* correctly rounded, locale independent */
    if (text != short_text) free(text);
    if (out->d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return UNSUPPORTED;
    }
    /* msgspec refuses a float beyond the double range ("Number out of range"), even where it is skipped */
    return isfinite(out->d) ? OK : UNSUPPORTED;
}

static int skip_value(Cursor *c, int depth);

static int skip_container(Cursor *c, int depth, unsigned char close, int keyed) {
    if (depth > MAX_DEPTH) return UNSUPPORTED;
    c->p++;
    skip_whitespace(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return OK;
    }
    for (;;) {
        if (keyed) {
            Span key;
            if (c->p >= c->end || *c->p != '"' || scan_string(c, &key) != OK || expect(c, ':') != OK)
                return UNSUPPORTED;
        }
        if (skip_value(c, depth + 1) != OK) return UNSUPPORTED;
        skip_whitespace(c);
        if (c->p >= c->end) return UNSUPPORTED;
        if (*c->p == close) {
            c->p++;
            return OK;
        }
        if (*c->p != ',') return UNSUPPORTED;
        c->p++;
        skip_whitespace(c);
    }
}

static int skip_literal(Cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return UNSUPPORTED;
    c->p += n;
    return OK;
}

static int skip_value(Cursor *c, int depth) {
    if (c->p >= c->end) return UNSUPPORTED;
    Span span;
    Number number;
    switch (*c->p) {
        case '"': return scan_string(c, &span);
        case '{': return skip_container(c, depth, '}', 1);
        case '[': return skip_container(c, depth, ']', 0);
        case 't': return skip_literal(c, "true", 4);
        case 'f': return skip_literal(c, "false", 5);
        case 'n': return skip_literal(c, "null", 4);
        default: return scan_number(c, &number);
    }
}

/* A scalar where msgspec expects int | float | str | None. VALUE_INVALID: any other JSON type, which
 * makes msgspec's typed decode fail (the Python parser then takes the lenient path). */
typedef enum { SCALAR_STRING, SCALAR_NUMBER, SCALAR_NULL, SCALAR_INVALID } ScalarKind;

typedef struct {
    ScalarKind kind;
    Span string;
    Number number;
    const unsigned char *start, *end; /* the value as written */
} Scalar;

static int scan_scalar(Cursor *c, Scalar *out) {
    memset(out, 0, sizeof(*out));
    out->start = c->p;
    int status;
    if (c->p >= c->end) return UNSUPPORTED;
    if (*c->p == '"') {
        out->kind = SCALAR_STRING;
        status = scan_string(c, &out->string);
    } else if (*c->p == 'n') {
        out->kind = SCALAR_NULL;
        status = skip_literal(c, "null", 4);
    } else if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
        out->kind = SCALAR_NUMBER;
        status = scan_number(c, &out->number);
    } else {
        out->kind = SCALAR_INVALID;
        status = skip_value(c, 1);
    }
    out->end = c->p;
    return status;
}

/* ---- the fields the parser reads ---------------------------------------------------------------------- */
typedef enum {
    AS_NUMBER,    /* int | float | str | None, validated only */
    AS_INT,       /* stored as int64; None -> NO_ID */
    AS_INT32,     /* stored as int64, must fit the table's int32 column */
    AS_INT8,      /* stored as int64, must fit the table's int8 column */
    AS_FLOAT,     /* stored as float64; None -> NaN */
    AS_RAW,       /* stored as the exact JSON text (msgspec.Raw) */
    AS_STR,       /* str | None */
    AS_COLLECTIVE /* a number field whose presence sends the args to the Python parser */
} FieldType;

typedef struct {
    const char *name;
    FieldType type;
    int slot;
} Field;

enum {
    ARG_EXTERNAL_ID,
    ARG_EXTERNAL_ID_OLD,
    ARG_CORRELATION,
    ARG_SEQUENCE_NUMBER,
    ARG_FWD_THREAD,
    ARG_DEVICE,
    ARG_STREAM,
    ARG_REGISTERS,
    ARG_SHARED_MEMORY,
    ARG_BYTES,
    ARG_PYTHON_ID,
    ARG_PYTHON_PARENT_ID,
    ARG_PYTHON_MODULE_ID,
    ARG_ADDR,
    ARG_MEMORY_BYTES,
    ARG_TOTAL_ALLOCATED,
    ARG_TOTAL_RESERVED,
    ARG_DEVICE_TYPE,
    ARG_DEVICE_ID,
    INT_ARGS
};
enum { ARG_BLOCKS_PER_SM, ARG_OCCUPANCY, FLOAT_ARGS };
enum { ARG_INPUT_DIMS, ARG_INPUT_DIMS_OLD, ARG_INPUT_TYPE, ARG_GRID, ARG_BLOCK, ARG_CALL_STACK, SPAN_ARGS };

/* Every key of kineto.Args, with the type msgspec checks. */
static const Field ARGS_FIELDS[] = {
    {"External id", AS_INT, ARG_EXTERNAL_ID},
    {"external id", AS_INT, ARG_EXTERNAL_ID_OLD},
    {"correlation", AS_INT, ARG_CORRELATION},
    {"Input Dims", AS_RAW, ARG_INPUT_DIMS},
    {"Input dims", AS_RAW, ARG_INPUT_DIMS_OLD},
    {"Input type", AS_RAW, ARG_INPUT_TYPE},
    {"Call stack", AS_STR, ARG_CALL_STACK},
    {"Sequence number", AS_INT, ARG_SEQUENCE_NUMBER},
    {"Fwd thread id", AS_INT, ARG_FWD_THREAD},
    {"device", AS_INT32, ARG_DEVICE},
    {"stream", AS_INT, ARG_STREAM},
    {"grid", AS_RAW, ARG_GRID},
    {"block", AS_RAW, ARG_BLOCK},
    {"registers per thread", AS_INT32, ARG_REGISTERS},
    {"shared memory", AS_INT, ARG_SHARED_MEMORY},
    {"blocks per SM", AS_FLOAT, ARG_BLOCKS_PER_SM},
    {"est. achieved occupancy %", AS_FLOAT, ARG_OCCUPANCY},
    {"bytes", AS_INT, ARG_BYTES},
    {"Python id", AS_INT, ARG_PYTHON_ID},
    {"Python parent id", AS_INT, ARG_PYTHON_PARENT_ID},
    {"Python module id", AS_INT, ARG_PYTHON_MODULE_ID},
    {"Addr", AS_INT, ARG_ADDR},
    {"Bytes", AS_INT, ARG_MEMORY_BYTES},
    {"Total Allocated", AS_INT, ARG_TOTAL_ALLOCATED},
    {"Total Reserved", AS_INT, ARG_TOTAL_RESERVED},
    {"Device Type", AS_INT8, ARG_DEVICE_TYPE},
    {"Device Id", AS_INT32, ARG_DEVICE_ID},
    {"name", AS_NUMBER, 0},
    {"sort_index", AS_NUMBER, 0},
    {"labels", AS_NUMBER, 0},
    {"Collective name", AS_COLLECTIVE, 0},
    {"In msg nelems", AS_NUMBER, 0},
    {"Out msg nelems", AS_NUMBER, 0},
    {"Group size", AS_NUMBER, 0},
    {"dtype", AS_NUMBER, 0},
    {"Process Group Name", AS_NUMBER, 0},
    {"Process Group Description", AS_NUMBER, 0},
    {"Process Group Ranks", AS_RAW, -1},
    {"Seq", AS_NUMBER, 0},
};
#define ARGS_FIELD_COUNT ((int)(sizeof(ARGS_FIELDS) / sizeof(ARGS_FIELDS[0])))

enum { EV_PH, EV_NAME, EV_CAT, EV_PID, EV_TID, EV_TS, EV_DUR, EV_ID, EV_BP, EV_S, EV_ARGS, EVENT_FIELD_COUNT };
static const char *EVENT_FIELDS[] = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s", "args"};

/* Key lookup without a loop of memcmp over every field: the fields whose name has a key's length and
 * first byte, chained (at most three share both); only those are compared. */
#define MAX_FIELD_NAME 32
typedef struct {
    const char *const *names; /* names[i * stride] is field i's name */
    size_t stride;
    int8_t head[MAX_FIELD_NAME][128]; /* by length, first byte: the first candidate, -1 if none */
    int8_t next[64];
} FieldIndex;

static FieldIndex ARGS_INDEX, EVENT_INDEX;

static inline const char *field_name(const FieldIndex *index, int i) {
    return *(const char *const *)((const char *)index->names + (size_t)i * index->stride);
}

static int index_fields(FieldIndex *index, const char *const *names, size_t stride, int count) {
    index->names = names;
    index->stride = stride;
    memset(index->head, -1, sizeof(index->head));
    for (int i = count - 1; i >= 0; i--) { /* backwards: each chain in table order */
        const char *name = field_name(index, i);
        size_t n = strlen(name);
        if (n == 0 || n >= MAX_FIELD_NAME || (unsigned char)name[0] >= 128 || count > 64) return -1;
        index->next[i] = index->head[n][(unsigned char)name[0]];
        index->head[n][(unsigned char)name[0]] = (int8_t)i;
    }
    return 0;
}

static inline int same_bytes(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) /* keys are short: no call to memcmp */
        if (a[i] != b[i]) return 0;
    return 1;
}

static inline int find_field(const Span *key, const FieldIndex *index) {
    if (key->n <= 0 || key->n >= MAX_FIELD_NAME || key->s[0] >= 128) return -1;
    for (int i = index->head[key->n][key->s[0]]; i >= 0; i = index->next[i])
        if (same_bytes((const unsigned char *)field_name(index, i) + 1, key->s + 1, key->n - 1)) return i;
    return -1;
}

/* What one event's keys said, before it is known whether it is a complete event. */
typedef struct {
    int is_complete;
    int is_instant; /* ph "i", "I", "R" or "n" */
    int flow_phase; /* 0, 1, 2 for "s", "t", "f"; -1 for any other phase */
    int64_t id;
    int odd_flow_fields; /* a str or float id, an escaped bp: the Python parser's rules apply */
    int binds_enclosing;
    int unusual; /* a complete event the columns cannot hold exactly: the piece goes to Python */
    int collective;
    Span name, cat;
    const unsigned char *pid, *tid;
    Py_ssize_t pid_n, tid_n;
    int has_ts;
    double ts, dur;
    int64_t ints[INT_ARGS];
    int has_int[INT_ARGS];
    double floats[FLOAT_ARGS];
    const unsigned char *spans[SPAN_ARGS];
    Py_ssize_t span_n[SPAN_ARGS];
    const unsigned char *args_start, *args_end;
} EventFields;

typedef struct {
    Cursor cursor;
    Buffer rows, flows, memory, others;
    Py_ssize_t row_count, flow_count, memory_count, other_count;
    SpanTable names, cats, tracks, call_stacks, raws, flow_cats, flow_tracks, memory_tracks;
    PyObject *collectives; /* list of (row, args JSON bytes) */
} Decoder;

static int store_int(EventFields *event, int slot, const Scalar *value, int64_t low, int64_t high) {
    if (value->kind == SCALAR_NULL) return OK;
    if (value->kind != SCALAR_NUMBER || value->number.kind != NUMBER_INT) {
        event->unusual = 1; /* a float, str or big int: Python's coercion rules apply */
        return OK;
    }
    int64_t v = value->number.i;
    if (v < low || v > high) event->unusual = 1;
    event->ints[slot] = v;
    event->has_int[slot] = 1;
    return OK;
}

static int parse_args(Decoder *decoder, EventFields *event) {
    Cursor *c = &decoder->cursor;
    uint64_t seen = 0;
    event->args_start = c->p;
    c->p++;
    skip_whitespace(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        event->args_end = c->p;
        return OK;
    }
    for (;;) {
        Span key;
        if (c->p >= c->end || *c->p != '"' || scan_string(c, &key) != OK || key.escaped) return UNSUPPORTED;
        if (expect(c, ':') != OK) return UNSUPPORTED;
        int index = find_field(&key, &ARGS_INDEX);
        if (index < 0) {
            if (skip_value(c, 2) != OK) return UNSUPPORTED;
        } else {
            const Field *field = &ARGS_FIELDS[index];
            if (seen & (1ULL << index)) return UNSUPPORTED; /* a repeated key */
            seen |= 1ULL << index;
            if (field->type == AS_RAW) {
                const unsigned char *start = c->p;
                if (skip_value(c, 2) != OK) return UNSUPPORTED;
                if (field->slot >= 0) {
                    event->spans[field->slot] = start;
                    event->span_n[field->slot] = c->p - start;
                }
            } else {
                Scalar value;
                if (scan_scalar(c, &value) != OK) return UNSUPPORTED;
                if (field->type == AS_STR) {
                    if (value.kind == SCALAR_STRING) {
                        event->spans[ARG_CALL_STACK] = value.string.s;
                        event->span_n[ARG_CALL_STACK] = value.string.n;
                    } else if (value.kind != SCALAR_NULL) {
                        return UNSUPPORTED;
                    }
                } else if (value.kind == SCALAR_INVALID) {
                    return UNSUPPORTED;
                } else if (field->type == AS_INT) {
                    store_int(event, field->slot, &value, INT64_MIN, INT64_MAX);
                } else if (field->type == AS_INT32) {
                    store_int(event, field->slot, &value, INT32_MIN, INT32_MAX);
                } else if (field->type == AS_INT8) {
                    store_int(event, field->slot, &value, INT8_MIN, INT8_MAX);
                } else if (field->type == AS_FLOAT && value.kind != SCALAR_NULL) {
                    if (value.kind != SCALAR_NUMBER || value.number.kind == NUMBER_UNSAFE) event->unusual = 1;
                    event->floats[field->slot] = value.number.d;
                } else if (field->type == AS_COLLECTIVE && value.kind != SCALAR_NULL) {
                    event->collective = 1;
                }
            }
        }
        skip_whitespace(c);
        if (c->p >= c->end) return UNSUPPORTED;
        if (*c->p == '}') {
            c->p++;
            event->args_end = c->p;
            return OK;
        }
        if (*c->p != ',') return UNSUPPORTED;
        c->p++;
        skip_whitespace(c);
    }
}

/* A time as the Python parser's float64 column holds it; anything else makes the event unusual. */
static void store_time(EventFields *event, const Scalar *value, double *target, int null_is_zero) {
    if (value->kind == SCALAR_NUMBER && value->number.kind != NUMBER_UNSAFE) {
        *target = value->number.d;
    } else if (value->kind == SCALAR_NULL && null_is_zero) {
        *target = 0.0;
    } else {
        event->unusual = 1;
    }
}

/* pid / tid: ints and strs are tracks the Python parser keys exactly like this; floats and None are not. */
static void store_track_part(EventFields *event, const Scalar *value, const unsigned char **part, Py_ssize_t *n) {
    if (value->kind == SCALAR_STRING || (value->kind == SCALAR_NUMBER && value->number.kind == NUMBER_INT)) {
        *part = value->start;
        *n = value->end - value->start;
    } else {
        event->unusual = 1;
    }
}

static int parse_event_fields(Decoder *decoder, EventFields *event) {
    Cursor *c = &decoder->cursor;
    unsigned seen = 0;
    c->p++;
    skip_whitespace(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return OK;
    }
    for (;;) {
        Span key;
        if (c->p >= c->end || *c->p != '"' || scan_string(c, &key) != OK || key.escaped) return UNSUPPORTED;
        if (expect(c, ':') != OK) return UNSUPPORTED;
        int index = find_field(&key, &EVENT_INDEX);
        if (index >= 0) {
            if (seen & (1u << index)) return UNSUPPORTED;
            seen |= 1u << index;
        }
        if (index < 0) {
            if (skip_value(c, 1) != OK) return UNSUPPORTED;
        } else if (index == EV_ARGS) {
            if (c->p < c->end && *c->p == '{') {
                if (parse_args(decoder, event) != OK) return UNSUPPORTED;
            } else if (skip_literal(c, "null", 4) != OK) {
                return UNSUPPORTED; /* args of another type: msgspec's typed decode fails */
            }
        } else {
            Scalar value;
            if (scan_scalar(c, &value) != OK || value.kind == SCALAR_INVALID) return UNSUPPORTED;
            switch (index) {
                case EV_PH:
                    if (value.kind == SCALAR_STRING && value.string.escaped) return UNSUPPORTED;
                    if (value.kind == SCALAR_STRING && value.string.n == 1) {
                        const char *phase = strchr("stf", value.string.s[0]);
                        event->is_complete = value.string.s[0] == 'X';
                        event->is_instant = memchr("iIRn", value.string.s[0], 4) != NULL;
                        if (phase != NULL && value.string.s[0] != '\0') event->flow_phase = (int)(phase - "stf");
                    }
                    break;
                case EV_NAME:
                case EV_CAT:
                    if (value.kind != SCALAR_STRING) event->unusual = 1; /* str() of a number: Python's rules */
                    *(index == EV_NAME ? &event->name : &event->cat) = value.string;
                    break;
                case EV_PID: store_track_part(event, &value, &event->pid, &event->pid_n); break;
                case EV_TID: store_track_part(event, &value, &event->tid, &event->tid_n); break;
                case EV_TS:
                    event->has_ts = 1;
                    store_time(event, &value, &event->ts, 0);
                    break;
                case EV_DUR: store_time(event, &value, &event->dur, 1); break;
                case EV_ID: /* flow ids: ints as they are, None -> NO_ID; str and float ids are Python's */
                    if (value.kind == SCALAR_NUMBER && value.number.kind == NUMBER_INT) {
                        event->id = value.number.i;
                    } else if (value.kind != SCALAR_NULL) {
                        event->odd_flow_fields = 1;
                    }
                    break;
                case EV_BP:
                    if (value.kind == SCALAR_STRING && value.string.escaped) event->odd_flow_fields = 1;
                    event->binds_enclosing = value.kind == SCALAR_STRING && value.string.n == 1 && value.string.s[0] == 'e';
                    break;
                default: break; /* s: only its type matters here */
            }
        }
        skip_whitespace(c);
        if (c->p >= c->end) return UNSUPPORTED;
        if (*c->p == '}') {
            c->p++;
            return OK;
        }
        if (*c->p != ',') return UNSUPPORTED;
        c->p++;
        skip_whitespace(c);
    }
}

static const unsigned char ZERO_TEXT[] = "0"; /* msgspec's default pid / tid: 0 */

static int32_t track_id(SpanTable *table, const EventFields *event) {
    return table_id(table, event->pid ? event->pid : ZERO_TEXT, event->pid ? event->pid_n : 1,
                    event->tid ? event->tid : ZERO_TEXT, event->tid ? event->tid_n : 1);
}

static int32_t span_id(SpanTable *table, const unsigned char *s, Py_ssize_t n) {
    return s == NULL ? NO_ID : table_id(table, s, n, NULL, 0);
}

static int add_complete_row(Decoder *decoder, EventFields *event) {
    Row row;
    memset(&row, 0, sizeof(row));
    row.ts = event->ts;
    row.dur = event->dur;
    row.blocks_per_sm = event->floats[ARG_BLOCKS_PER_SM];
    row.occupancy = event->floats[ARG_OCCUPANCY];
    int64_t *ints = event->ints;
    int *has = event->has_int;
    row.external_id = has[ARG_EXTERNAL_ID] ? ints[ARG_EXTERNAL_ID]
                      : has[ARG_EXTERNAL_ID_OLD] ? ints[ARG_EXTERNAL_ID_OLD]
                                                 : NO_ID;
#define INT_OR_NONE(slot) (has[slot] ? ints[slot] : NO_ID)
    row.correlation = INT_OR_NONE(ARG_CORRELATION);
    row.sequence_number = INT_OR_NONE(ARG_SEQUENCE_NUMBER);
    row.fwd_thread = INT_OR_NONE(ARG_FWD_THREAD);
    row.device = INT_OR_NONE(ARG_DEVICE);
    row.stream = INT_OR_NONE(ARG_STREAM);
    row.registers_per_thread = INT_OR_NONE(ARG_REGISTERS);
    row.shared_memory = INT_OR_NONE(ARG_SHARED_MEMORY);
    row.bytes = INT_OR_NONE(ARG_BYTES);
    row.python_id = INT_OR_NONE(ARG_PYTHON_ID);
    row.python_parent_id = INT_OR_NONE(ARG_PYTHON_PARENT_ID);
    row.python_module_id = INT_OR_NONE(ARG_PYTHON_MODULE_ID);
#undef INT_OR_NONE
    const unsigned char **spans = event->spans;
    Py_ssize_t *n = event->span_n;
    int dims = spans[ARG_INPUT_DIMS] ? ARG_INPUT_DIMS : ARG_INPUT_DIMS_OLD;
    row.name = table_id(&decoder->names, event->name.s, event->name.n, NULL, 0);
    row.cat = table_id(&decoder->cats, event->cat.s, event->cat.n, NULL, 0);
    row.track = track_id(&decoder->tracks, event);
    row.input_dims = span_id(&decoder->raws, spans[dims], n[dims]);
    row.input_types = span_id(&decoder->raws, spans[ARG_INPUT_TYPE], n[ARG_INPUT_TYPE]);
    row.grid = span_id(&decoder->raws, spans[ARG_GRID], n[ARG_GRID]);
    row.block = span_id(&decoder->raws, spans[ARG_BLOCK], n[ARG_BLOCK]);
    row.call_stack = span_id(&decoder->call_stacks, spans[ARG_CALL_STACK], n[ARG_CALL_STACK]);
    if (PyErr_Occurred()) return NO_MEMORY;
    /* the Python parser's test for an op with shape or stack args */
    row.has_op_args = spans[ARG_INPUT_DIMS] || spans[ARG_INPUT_DIMS_OLD] || spans[ARG_CALL_STACK] ||
                      has[ARG_SEQUENCE_NUMBER];
    if (event->collective) {
        PyObject *entry = Py_BuildValue("(ny#)", decoder->row_count, (const char *)event->args_start,
                                        (Py_ssize_t)(event->args_end - event->args_start));
        if (entry == NULL || PyList_Append(decoder->collectives, entry) < 0) {
            Py_XDECREF(entry);
            return NO_MEMORY;
        }
        Py_DECREF(entry);
    }
    decoder->row_count++;
    return buffer_append(&decoder->rows, &row, sizeof(row));
}

static int add_memory_row(Decoder *decoder, const EventFields *event) {
    MemoryRow row;
    memset(&row, 0, sizeof(row));
    const int64_t *ints = event->ints;
    const int *has = event->has_int;
    row.ts = event->ts;
    row.addr = has[ARG_ADDR] ? ints[ARG_ADDR] : NO_ID;
    row.bytes = has[ARG_MEMORY_BYTES] ? ints[ARG_MEMORY_BYTES] : 0; /* the Python parser's default here */
    row.total_allocated = has[ARG_TOTAL_ALLOCATED] ? ints[ARG_TOTAL_ALLOCATED] : NO_ID;
    row.total_reserved = has[ARG_TOTAL_RESERVED] ? ints[ARG_TOTAL_RESERVED] : NO_ID;
    row.device_type = has[ARG_DEVICE_TYPE] ? ints[ARG_DEVICE_TYPE] : NO_ID;
    row.device_id = has[ARG_DEVICE_ID] ? ints[ARG_DEVICE_ID] : NO_ID;
    row.track = track_id(&decoder->memory_tracks, event);
    if (PyErr_Occurred()) return NO_MEMORY;
    decoder->memory_count++;
    return buffer_append(&decoder->memory, &row, sizeof(row));
}

static int add_flow_row(Decoder *decoder, const EventFields *event) {
    FlowRow row;
    memset(&row, 0, sizeof(row));
    row.ts = event->ts;
    row.id = event->id;
    row.phase = (int8_t)event->flow_phase;
    row.binds_enclosing = (int8_t)event->binds_enclosing;
    row.cat = table_id(&decoder->flow_cats, event->cat.s, event->cat.n, NULL, 0);
    row.track = track_id(&decoder->flow_tracks, event);
    if (PyErr_Occurred()) return NO_MEMORY;
    decoder->flow_count++;
    return buffer_append(&decoder->flows, &row, sizeof(row));
}

static int parse_event(Decoder *decoder) {
    static const unsigned char empty[1] = {0};
    EventFields event;
    memset(&event, 0, sizeof(event));
    event.flow_phase = -1;
    event.id = NO_ID;
    event.name.s = event.cat.s = empty; /* msgspec's default: "" */
    event.floats[ARG_BLOCKS_PER_SM] = event.floats[ARG_OCCUPANCY] = NAN;
    const unsigned char *start = decoder->cursor.p;
    if (parse_event_fields(decoder, &event) != OK) return UNSUPPORTED;
    if (event.is_instant && event.name.escaped) return UNSUPPORTED; /* is it "[memory]"? Python decides */
    if (event.is_instant && event.name.n == 8 && memcmp(event.name.s, "[memory]", 8) == 0) {
        if (event.unusual || !event.has_ts) return UNSUPPORTED; /* coercions and warnings: Python's */
        return add_memory_row(decoder, &event);
    }
    if (event.flow_phase >= 0) { /* a flow with a bad time or odd types stays the Python parser's */
        if (event.unusual || event.odd_flow_fields || !event.has_ts) return UNSUPPORTED;
        return add_flow_row(decoder, &event);
    }
    if (!event.is_complete) {
        const char *separator = decoder->other_count ? "," : "[";
        decoder->other_count++;
        if (buffer_append(&decoder->others, separator, 1) != OK) return NO_MEMORY;
        return buffer_append(&decoder->others, start, (size_t)(decoder->cursor.p - start));
    }
    /* what the Python parser would drop, zero or coerce (with a warning) stays its job: a start time past
     * kineto.MAX_ABS_TS_US (its nanoseconds would not fit an int64), a duration past kineto.MAX_DUR_US */
    if (event.unusual || !event.has_ts || fabs(event.ts) > MAX_ABS_TS_US || !(event.dur >= 0.0 && event.dur <= MAX_DUR_US))
        return UNSUPPORTED;
    return add_complete_row(decoder, &event);
}

static int parse_piece(Decoder *decoder) {
    Cursor *c = &decoder->cursor;
    skip_whitespace(c);
    if (c->p >= c->end || *c->p != '[') return UNSUPPORTED;
    c->p++;
    skip_whitespace(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            if (c->p >= c->end || *c->p != '{') return UNSUPPORTED; /* items that are not objects */
            int status = parse_event(decoder);
            if (status != OK) return status;
            skip_whitespace(c);
            if (c->p >= c->end) return UNSUPPORTED;
            if (*c->p == ']') {
                c->p++;
                break;
            }
            if (*c->p != ',') return UNSUPPORTED;
            c->p++;
            skip_whitespace(c);
        }
    }
    skip_whitespace(c);
    return c->p == c->end ? OK : UNSUPPORTED;
}

static void decoder_free(Decoder *decoder) {
    free(decoder->rows.data);
    free(decoder->others.data);
    free(decoder->flows.data);
    table_free(&decoder->flow_cats);
    table_free(&decoder->flow_tracks);
    free(decoder->memory.data);
    table_free(&decoder->memory_tracks);
    table_free(&decoder->names);
    table_free(&decoder->cats);
    table_free(&decoder->tracks);
    table_free(&decoder->call_stacks);
    table_free(&decoder->raws);
    Py_XDECREF(decoder->collectives);
}

static PyObject *decode(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Decoder decoder;
    memset(&decoder, 0, sizeof(decoder));
    decoder.cursor.p = view.buf;
    decoder.cursor.end = (const unsigned char *)view.buf + view.len;
    int status = OK;
    if (table_init(&decoder.names, VALUE_STRING) || table_init(&decoder.cats, VALUE_STRING) ||
        table_init(&decoder.tracks, VALUE_TRACK) || table_init(&decoder.call_stacks, VALUE_STRING) ||
        table_init(&decoder.raws, VALUE_BYTES) || table_init(&decoder.flow_cats, VALUE_STRING) ||
        table_init(&decoder.flow_tracks, VALUE_TRACK) || table_init(&decoder.memory_tracks, VALUE_TRACK) ||
        (decoder.collectives = PyList_New(0)) == NULL) {
        status = NO_MEMORY;
    } else {
        status = parse_piece(&decoder);
    }
    PyObject *result = NULL;
    if (status == OK && decoder.other_count) status = buffer_append(&decoder.others, "]", 1);
    if (status == OK) {
        result = Py_BuildValue("(y#ny#ny#ny#nOOOOOOOOO)", decoder.rows.data ? decoder.rows.data : "",
                               (Py_ssize_t)decoder.rows.len, decoder.row_count,
                               decoder.memory.data ? decoder.memory.data : "", (Py_ssize_t)decoder.memory.len,
                               decoder.memory_count,
                               decoder.flows.data ? decoder.flows.data : "", (Py_ssize_t)decoder.flows.len,
                               decoder.flow_count, decoder.others.data ? decoder.others.data : "",
                               (Py_ssize_t)decoder.others.len, decoder.other_count, decoder.names.values,
                               decoder.cats.values, decoder.tracks.values, decoder.call_stacks.values,
                               decoder.raws.values, decoder.collectives, decoder.flow_cats.values,
                               decoder.flow_tracks.values, decoder.memory_tracks.values);
    } else if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_MemoryError)) { /* e.g. a str the UTF-8 check let through */
            PyErr_Clear();
            result = Py_NewRef(Py_None);
        }
    } else if (status == NO_MEMORY) {
        PyErr_NoMemory();
    } else {
        result = Py_NewRef(Py_None);
    }
    decoder_free(&decoder);
    PyBuffer_Release(&view);
    return result;
}

/* (name, numpy type, offset) of every Row field: the Python side views the rows as a structured array. */
static PyObject *row_fields(void) {
#define FIELD(name, type) Py_BuildValue("(ssn)", #name, type, (Py_ssize_t)offsetof(Row, name))
    PyObject *fields[] = {
        FIELD(ts, "f8"),           FIELD(dur, "f8"),           FIELD(blocks_per_sm, "f8"),
        FIELD(occupancy, "f8"),    FIELD(external_id, "i8"),   FIELD(correlation, "i8"),
        FIELD(sequence_number, "i8"), FIELD(fwd_thread, "i8"), FIELD(device, "i8"),
        FIELD(stream, "i8"),       FIELD(registers_per_thread, "i8"), FIELD(shared_memory, "i8"),
        FIELD(bytes, "i8"),        FIELD(python_id, "i8"),     FIELD(python_parent_id, "i8"),
        FIELD(python_module_id, "i8"), FIELD(name, "i4"),      FIELD(cat, "i4"),
        FIELD(track, "i4"),        FIELD(input_dims, "i4"),    FIELD(input_types, "i4"),
        FIELD(call_stack, "i4"),   FIELD(grid, "i4"),          FIELD(block, "i4"),
        FIELD(has_op_args, "i1"),
    };
#undef FIELD
    Py_ssize_t count = (Py_ssize_t)(sizeof(fields) / sizeof(fields[0]));
    PyObject *list = PyList_New(count);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (fields[i] == NULL || list == NULL) {
            for (Py_ssize_t j = i; j < count; j++) Py_XDECREF(fields[j]);
            Py_XDECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, fields[i]);
    }
    return list;
}

static PyObject *flow_fields(void) {
    return Py_BuildValue("[(ssn)(ssn)(ssn)(ssn)(ssn)(ssn)]", "ts", "f8", (Py_ssize_t)offsetof(FlowRow, ts), "id",
                         "i8", (Py_ssize_t)offsetof(FlowRow, id), "cat", "i4", (Py_ssize_t)offsetof(FlowRow, cat),
                         "track", "i4", (Py_ssize_t)offsetof(FlowRow, track), "phase", "i1",
                         (Py_ssize_t)offsetof(FlowRow, phase), "binds_enclosing", "i1",
                         (Py_ssize_t)offsetof(FlowRow, binds_enclosing));
}

static PyObject *memory_fields(void) {
#define FIELD(name, type) (#name), (type), (Py_ssize_t)offsetof(MemoryRow, name)
    return Py_BuildValue("[(ssn)(ssn)(ssn)(ssn)(ssn)(ssn)(ssn)(ssn)]", FIELD(ts, "f8"), FIELD(addr, "i8"),
                         FIELD(bytes, "i8"), FIELD(total_allocated, "i8"), FIELD(total_reserved, "i8"),
                         FIELD(device_type, "i8"), FIELD(device_id, "i8"), FIELD(track, "i4"));
#undef FIELD
}

static PyMethodDef METHODS[] = {
    {"decode", decode, METH_O,
     "decode(piece) -> tuple | None: the columns of a piece's complete, memory and flow events and its other events "
     "as JSON, or None if the piece needs the Python parser."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native_events", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__native_events(void) {
    if (index_fields(&ARGS_INDEX, &ARGS_FIELDS[0].name, sizeof(Field), ARGS_FIELD_COUNT) < 0 ||
        index_fields(&EVENT_INDEX, EVENT_FIELDS, sizeof(char *), EVENT_FIELD_COUNT) < 0) {
        PyErr_SetString(PyExc_SystemError, "_native_events: a field name too long for the key index");
        return NULL;
    }
    PyObject *module = PyModule_Create(&MODULE);
    if (module == NULL) return NULL;
    PyObject *fields = row_fields();
    if (fields == NULL || PyModule_AddObject(module, "ROW_FIELDS", fields) < 0 ||
        PyModule_AddIntConstant(module, "ROW_SIZE", (long)sizeof(Row)) < 0) {
        Py_XDECREF(fields);
        Py_DECREF(module);
        return NULL;
    }
    PyObject *memory = memory_fields();
    if (memory == NULL || PyModule_AddObject(module, "MEMORY_FIELDS", memory) < 0 ||
        PyModule_AddIntConstant(module, "MEMORY_SIZE", (long)sizeof(MemoryRow)) < 0) {
        Py_XDECREF(memory);
        Py_DECREF(module);
        return NULL;
    }
    PyObject *flows = flow_fields();
    if (flows == NULL || PyModule_AddObject(module, "FLOW_FIELDS", flows) < 0 ||
        PyModule_AddIntConstant(module, "FLOW_SIZE", (long)sizeof(FlowRow)) < 0) {
        Py_XDECREF(flows);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
