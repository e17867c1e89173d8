/* JSON's grammar, as msgspec holds a document to it, for the trace scanner (_scan.c).

   Each function reads one piece of JSON at a cursor and returns 0 (the cursor past it) or -1
   where the text is not that piece, or not one msgspec would take: the scanner then declines
   the event, and the Python reader decides. Declining is always safe; accepting what msgspec
   refuses is the one mistake these functions must not make (tests/test_trace_fuzz.py).

   Defined here, static, for the one file that includes it: the scanner calls them for every
   token, and in another translation unit they could not be inlined (20 % slower). */

#ifndef SCAN_JSON_H
#define SCAN_JSON_H

#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *end;
} Cursor;

static int skip_value(Cursor *c, int depth);

/* Past spaces, tabs and line ends. */
static void skip_space(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hex_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* The four hex digits after ``\u`` at the cursor, as a code unit; -1 where they are not. */
static long scan_code_unit(Cursor *c) {
    long unit = 0;
    for (int i = 0; i < 4; i++, c->p++) {
        int digit = c->p < c->end ? hex_value(*c->p) : -1;
        if (digit < 0) return -1;
        unit = unit * 16 + digit;
    }
    return unit;
}

/* One escape, the cursor on its backslash: 0, or -1 where msgspec refuses it. */
static int scan_escape(Cursor *c) {
    c->p++;
    if (c->p >= c->end) return -1;
    char ch = *c->p++;
    if (strchr("\"\\/bfnrt", ch) && ch) return 0;
    if (ch != 'u') return -1;
    long unit = scan_code_unit(c);
    if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return -1; /* a low surrogate alone */
    if (unit < 0xD800 || unit > 0xDBFF) return 0;
    /* a high surrogate: its low one must follow */
    if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u') return -1;
    c->p += 2;
    unit = scan_code_unit(c);
    return unit >= 0xDC00 && unit <= 0xDFFF ? 0 : -1;
}

/* The bytes of one UTF-8 character past its first (``lead``, at least 0x80) at the cursor: 0,
   or -1 where they are not UTF-8 (RFC 3629: no overlong form, no surrogate, at most U+10FFFF). */
static int scan_utf8_tail(Cursor *c, unsigned char lead) {
    int more;
    unsigned char low = 0x80, high = 0xBF; /* the first continuation byte's range */
    if (lead >= 0xC2 && lead <= 0xDF) more = 1;
    else if (lead >= 0xE0 && lead <= 0xEF) {
        more = 2;
        if (lead == 0xE0) low = 0xA0;
        if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        more = 3;
        if (lead == 0xF0) low = 0x90;
        if (lead == 0xF4) high = 0x8F;
    } else {
        return -1;
    }
    for (int i = 0; i < more; i++, c->p++) {
        if (c->p >= c->end) return -1;
        unsigned char byte = (unsigned char)*c->p;
        if (byte < (i ? 0x80 : low) || byte > (i ? 0xBF : high)) return -1;
    }
    return 0;
}

/* A string at the cursor: its bytes between the quotes, and whether it holds an escape. Escapes
   are checked as msgspec checks them (\uXXXX, surrogates in pairs) and the bytes must be UTF-8
   (msgspec checks only the strings it decodes; refusing more here only declines). */
static int scan_string(Cursor *c, const char **start, Py_ssize_t *length, int *escaped) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *s = ++c->p;
    *escaped = 0;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            *start = s;
            *length = c->p - s;
            c->p++;
            return 0;
        }
        if (ch == '\\') {
            *escaped = 1;
            if (scan_escape(c)) return -1;
        } else if (ch < 0x20) {
            return -1; /* JSON allows no raw control character */
        } else if (ch < 0x80) {
            c->p++;
        } else {
            c->p++;
            if (scan_utf8_tail(c, ch)) return -1;
        }
    }
    return -1;
}

static void skip_digits(Cursor *c) {
    while (c->p < c->end && is_digit(*c->p)) c->p++;
}

/* A number at the cursor, by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(Cursor *c, const char **start, Py_ssize_t *length) {
    *start = c->p;
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p >= c->end || !is_digit(*c->p)) return -1;
    if (*c->p == '0') c->p++; /* no leading zero before other digits */
    else skip_digits(c);
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return -1;
        skip_digits(c);
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return -1;
        skip_digits(c);
    }
    *length = c->p - *start;
    return 0;
}

/* A number's text as a double, as msgspec reads it; -1 where it is out of a double's range
   (msgspec refuses one too large; one too small is left to it). */
static int parse_double(const char *s, Py_ssize_t n, double *out) {
    char buffer[64];
    if (n <= 0 || n >= (Py_ssize_t)sizeof buffer) return -1;
    memcpy(buffer, s, (size_t)n);
    buffer[n] = 0;
    char *stop;
    errno = 0;
    *out = strtod(buffer, &stop);
    if (stop != buffer + n || errno == ERANGE) return -1;
    /* msgspec reads "-0" as the integer 0, then as a float: +0.0 ("-0.0" stays -0.0) */
    if (*out == 0.0 && !memchr(buffer, '.', (size_t)n) && !memchr(buffer, 'e', (size_t)n) &&
        !memchr(buffer, 'E', (size_t)n))
        *out = 0.0;
    return 0;
}

/* A number's text as an int64, where it is an integer of at most 18 digits (else -1). */
static int parse_int(const char *s, Py_ssize_t n, int64_t *out) {
    Py_ssize_t i = 0;
    int negative = 0;
    uint64_t value = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (i >= n || n - i > 18) return -1;
    for (; i < n; i++) {
        if (!is_digit(s[i])) return -1;
        value = value * 10 + (uint64_t)(s[i] - '0');
    }
    *out = negative ? -(int64_t)value : (int64_t)value;
    return 0;
}

/* After an object's member or a list's item: 1 where another follows (the comma passed), 0
   where ``close`` ends it (passed), -1 where neither does. */
static int after_member(Cursor *c, char close) {
    skip_space(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        skip_space(c);
        return 1;
    }
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    return -1;
}

/* An object's opening brace: 1 where a member follows, 0 where it is empty (closed), -1 where
   no object is there. */
static int open_object(Cursor *c) {
    skip_space(c);
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    skip_space(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    return 1;
}

/* A member's key and its colon, the cursor left at its value. */
static int member_key(Cursor *c, const char **key, Py_ssize_t *length, int *escaped) {
    if (scan_string(c, key, length, escaped)) return -1;
    skip_space(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_space(c);
    return 0;
}

static int skip_container(Cursor *c, char close, int depth) {
    c->p++; /* the opening bracket */
    skip_space(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    while (c->p < c->end) {
        if (close == '}') {
            const char *s;
            Py_ssize_t n;
            int escaped;
            if (member_key(c, &s, &n, &escaped)) return -1;
        }
        if (skip_value(c, depth + 1)) return -1;
        int more = after_member(c, close);
        if (more <= 0) return more;
    }
    return -1;
}

/* The literal ``word`` (true, false, null) at the cursor. */
static int skip_literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n)) return -1;
    c->p += n;
    return 0;
}

/* Any value, nested at most 64 deep below ``depth``. */
static int skip_value(Cursor *c, int depth) {
    skip_space(c);
    if (c->p >= c->end || depth > 64) return -1;
    const char *s;
    Py_ssize_t n;
    int escaped;
    switch (*c->p) {
        case '"':
            return scan_string(c, &s, &n, &escaped);
        case '{':
            return skip_container(c, '}', depth);
        case '[':
            return skip_container(c, ']', depth);
        case 't':
            return skip_literal(c, "true");
        case 'f':
            return skip_literal(c, "false");
        case 'n':
            return skip_literal(c, "null");
        default:
            return scan_number(c, &s, &n);
    }
}

#endif
