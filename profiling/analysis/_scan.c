/* The complete events of a chunk of a Chrome trace's ``traceEvents``, as columns, in one pass.

   What profiling/analysis/trace_events.py builds from msgspec's structs, without a Python
   object per event: for each event with ``"ph": "X"`` and a ``ts``, its category, name and
   (pid, tid) lane as codes (each distinct one kept once, as the UTF-8 of its JSON text, in the
   dicts passed in), ``ts`` and ``dur`` as doubles, where its ``args`` lie in the chunk, and
   ``args.correlation`` and ``args.stream``. Anything this scanner does not take exactly as
   msgspec would (an escaped name, a number where a string belongs, a value of another type)
   stops it: the caller then reads the whole trace the Python way, which accepts or refuses it
   as before. A chunk cut inside an event (inside a string, or inside its args) stops it at that
   event's end, and the caller cuts it before that event.

   scan(chunk: bytes, categories: dict, names: dict, lanes: dict) ->
       (events, kept, category, name, lane, ts, dur, args_at, args_len, correlation, stream)
   where ``events`` counts every object of the list, and the columns are bytes of int32,
   double or int64 values, ``kept`` of each; or, where it stopped, (cut, at): ``at`` the
   offset of the event it could not take, ``cut`` whether that event ran into the chunk's end
   (the chunk was cut inside it: cut it before that event) or not (take the Python way). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *end;
} Cursor;

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Column;

static int column_push(Column *c, const void *value, Py_ssize_t width) {
    if (c->size + width > c->capacity) {
        Py_ssize_t capacity = c->capacity ? c->capacity * 2 : 4096;
        while (capacity < c->size + width) capacity *= 2;
        char *data = realloc(c->data, (size_t)capacity);
        if (!data) return -1;
        c->data = data;
        c->capacity = capacity;
    }
    memcpy(c->data + c->size, value, (size_t)width);
    c->size += width;
    return 0;
}

static void skip_space(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* A string at the cursor (after its opening quote is checked): its bytes between the quotes;
   *escaped set if it holds a backslash. 0, or -1 where it does not close. */
static int scan_string(Cursor *c, const char **start, Py_ssize_t *length, int *escaped) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *s = ++c->p;
    *escaped = 0;
    while (c->p < c->end) {
        char ch = *c->p;
        if (ch == '"') {
            *start = s;
            *length = c->p - s;
            c->p++;
            return 0;
        }
        if (ch == '\\') {
            *escaped = 1;
            c->p += 2;
            continue;
        }
        if ((unsigned char)ch < 0x20) return -1; /* JSON allows no raw control character */
        c->p++;
    }
    return -1;
}

static int is_number_char(char ch) {
    return (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E';
}

/* A JSON number's text at the cursor. 0, or -1 where none is there. */
static int scan_number(Cursor *c, const char **start, Py_ssize_t *length) {
    const char *s = c->p;
    if (s >= c->end || !(*s == '-' || (*s >= '0' && *s <= '9'))) return -1;
    while (c->p < c->end && is_number_char(*c->p)) c->p++;
    *start = s;
    *length = c->p - s;
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

/* An object's opening brace at the cursor: 1 where a member follows, 0 where it is empty (its
   closing brace passed), -1 where no object is there. */
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

/* A member's key and its colon, the cursor left at its value. 0, or -1. */
static int member_key(Cursor *c, const char **key, Py_ssize_t *length, int *escaped) {
    if (scan_string(c, key, length, escaped)) return -1;
    skip_space(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_space(c);
    return 0;
}

static int skip_value(Cursor *c, int depth);

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

static int skip_literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n)) return -1;
    c->p += n;
    return 0;
}

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

/* A number's text as a double, as msgspec reads it (strtod rounds correctly too). */
static int parse_double(const char *s, Py_ssize_t n, double *out) {
    char buffer[64];
    if (n <= 0 || n >= (Py_ssize_t)sizeof buffer) return -1;
    memcpy(buffer, s, (size_t)n);
    buffer[n] = 0;
    char *stop;
    *out = strtod(buffer, &stop);
    return stop == buffer + n ? 0 : -1;
}

/* A number's text as an int64, where it is an integer that fits (else -1: the Python way). */
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
        if (s[i] < '0' || s[i] > '9') return -1;
        value = value * 10 + (uint64_t)(s[i] - '0');
    }
    *out = negative ? -(int64_t)value : (int64_t)value;
    return 0;
}

/* The code of a key (the bytes s[0:n]) in ``codes``, a new one where it is new. */
static int32_t code_of(PyObject *codes, const char *s, Py_ssize_t n) {
    PyObject *key = PyBytes_FromStringAndSize(s, n);
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(codes, key);
    int32_t code;
    if (found) {
        code = (int32_t)PyLong_AsLong(found);
    } else if (PyErr_Occurred()) {
        code = -1;
    } else {
        code = (int32_t)PyDict_GET_SIZE(codes);
        PyObject *value = PyLong_FromLong(code);
        if (!value || PyDict_SetItem(codes, key, value)) code = -1;
        Py_XDECREF(value);
    }
    Py_DECREF(key);
    return code;
}

/* ``args``' correlation and stream, at its top level (-1 where absent; a stream named by a
   string: -2). 0, or -1 where args is not an object of the kinds msgspec's reader takes. */
static int scan_args(Cursor *c, int64_t *correlation, int64_t *stream) {
    *correlation = -1;
    *stream = -1;
    int opened = open_object(c);
    if (opened <= 0) return opened;
    while (c->p < c->end) {
        const char *key, *s;
        Py_ssize_t key_length, n;
        int escaped;
        if (member_key(c, &key, &key_length, &escaped)) return -1;
        int is_correlation = !escaped && key_length == 11 && !memcmp(key, "correlation", 11);
        int is_stream = !escaped && key_length == 6 && !memcmp(key, "stream", 6);
        if (is_correlation || is_stream) {
            if (c->p < c->end && *c->p == '"' && is_stream) {
                if (scan_string(c, &s, &n, &escaped)) return -1;
                *stream = -2;
            } else {
                int64_t value;
                if (scan_number(c, &s, &n) || parse_int(s, n, &value)) return -1;
                *(is_correlation ? correlation : stream) = value;
            }
        } else if (skip_value(c, 1)) {
            return -1;
        }
        int more = after_member(c, '}');
        if (more <= 0) return more;
    }
    return -1;
}

typedef struct {
    Column category, name, lane, ts, dur, args_at, args_length, correlation, stream;
} Columns;

static void columns_free(Columns *k) {
    Column *all[] = {&k->category, &k->name, &k->lane, &k->ts, &k->dur,
                     &k->args_at, &k->args_length, &k->correlation, &k->stream};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* One event at the cursor, its columns pushed if it is complete. 1: pushed, 0: not complete,
   -1: not what this scanner takes. */
static int scan_event(Cursor *c, const char *chunk, Columns *k, PyObject *categories, PyObject *names,
                      PyObject *lanes) {
    const char *cat = "", *name = "", *pid = NULL, *tid = NULL, *args = NULL, *args_end = NULL, *s;
    Py_ssize_t cat_length = 0, name_length = 0, pid_length = 0, tid_length = 0, n;
    int x = 0, has_ts = 0, escaped;
    double ts = 0.0, dur = 0.0;
    int64_t correlation = -1, stream = -1;
    int opened = open_object(c);
    if (opened <= 0) return opened;
    while (c->p < c->end) {
        const char *key;
        Py_ssize_t key_length;
        if (member_key(c, &key, &key_length, &escaped) || escaped) return -1;
        if (c->p >= c->end) return -1;
#define KEY(word) (key_length == (Py_ssize_t)sizeof(word) - 1 && !memcmp(key, word, sizeof(word) - 1))
        if (KEY("ph") || KEY("cat") || KEY("name")) {
            if (scan_string(c, &s, &n, &escaped) || escaped) return -1;
            if (KEY("ph")) {
                x = n == 1 && s[0] == 'X';
            } else if (KEY("cat")) {
                cat = s;
                cat_length = n;
            } else {
                name = s;
                name_length = n;
            }
        } else if (KEY("pid") || KEY("tid")) {
            const char *start = c->p;
            int64_t number;
            if (*c->p == '"') {
                if (scan_string(c, &s, &n, &escaped) || escaped) return -1;
            } else if (*c->p == 'n') {
                if (skip_literal(c, "null")) return -1;
            } else if (scan_number(c, &s, &n) || parse_int(s, n, &number)) {
                return -1; /* a pid or tid msgspec reads as an int (or refuses) */
            }
            if (KEY("pid")) {
                pid = start;
                pid_length = c->p - start;
            } else {
                tid = start;
                tid_length = c->p - start;
            }
        } else if (KEY("ts") || KEY("dur")) {
            double value;
            if (*c->p == 'n' && KEY("ts")) {
                if (skip_literal(c, "null")) return -1;
                has_ts = 0;
            } else {
                if (scan_number(c, &s, &n) || parse_double(s, n, &value)) return -1;
                if (KEY("ts")) {
                    ts = value;
                    has_ts = 1;
                } else {
                    dur = value;
                }
            }
        } else if (KEY("args")) {
            args = c->p;
            if (scan_args(c, &correlation, &stream)) return -1;
            args_end = c->p;
        } else if (KEY("id") || KEY("bp") || KEY("s") || KEY("cname")) {
            if (skip_value(c, 1)) return -1; /* not read here; msgspec skips them too */
        } else if (skip_value(c, 1)) {
            return -1;
        }
#undef KEY
        int more = after_member(c, '}');
        if (more < 0) return -1;
        if (!more) break;
    }
    if (!x || !has_ts) return 0;
    /* a lane's key: the pid's text, a 0 byte, the tid's (absent: empty) */
    char lane_key[256];
    if (pid_length + tid_length + 1 > (Py_ssize_t)sizeof lane_key) return -1;
    if (pid_length) memcpy(lane_key, pid, (size_t)pid_length);
    lane_key[pid_length] = 0;
    if (tid_length) memcpy(lane_key + pid_length + 1, tid, (size_t)tid_length);
    int32_t category_code = code_of(categories, cat, cat_length);
    int32_t name_code = code_of(names, name, name_length);
    int32_t lane_code = code_of(lanes, lane_key, pid_length + 1 + tid_length);
    if (category_code < 0 || name_code < 0 || lane_code < 0) return -2;
    int64_t at = args ? (int64_t)(args - chunk) : -1;
    int64_t length = args ? (int64_t)(args_end - args) : 0;
    if (column_push(&k->category, &category_code, 4) || column_push(&k->name, &name_code, 4) ||
        column_push(&k->lane, &lane_code, 4) || column_push(&k->ts, &ts, 8) ||
        column_push(&k->dur, &dur, 8) || column_push(&k->args_at, &at, 8) ||
        column_push(&k->args_length, &length, 8) || column_push(&k->correlation, &correlation, 8) ||
        column_push(&k->stream, &stream, 8))
        return -3;
    return 1;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *arguments) {
    Py_buffer view;
    PyObject *categories, *names, *lanes;
    if (!PyArg_ParseTuple(arguments, "y*O!O!O!", &view, &PyDict_Type, &categories, &PyDict_Type, &names,
                          &PyDict_Type, &lanes))
        return NULL;
    const char *chunk = view.buf;
    Cursor c = {chunk, chunk + view.len};
    Columns k;
    memset(&k, 0, sizeof k);
    Py_ssize_t events = 0, kept = 0;
    const char *event_start = chunk;
    int failed = 0;
    skip_space(&c);
    if (c.p >= c.end || *c.p != '[') failed = -1;
    else c.p++;
    skip_space(&c);
    if (!failed && c.p < c.end && *c.p == ']') c.p++;
    else
        while (!failed) {
            skip_space(&c);
            event_start = c.p;
            int outcome = scan_event(&c, chunk, &k, categories, names, lanes);
            if (outcome < 0) {
                failed = outcome;
                break;
            }
            events++;
            kept += outcome;
            skip_space(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                continue;
            }
            if (c.p < c.end && *c.p == ']') {
                c.p++;
                break;
            }
            failed = -1;
        }
    skip_space(&c);
    if (!failed && c.p != c.end) failed = -1;
    /* the chunk ends in the "]" its caller added: a failure there or past it ran into the end */
    int cut = c.p >= c.end - 1;
    Py_ssize_t at = event_start - chunk;
    PyBuffer_Release(&view);
    if (failed) {
        columns_free(&k);
        if (failed == -3) return PyErr_NoMemory();
        if (PyErr_Occurred()) return NULL;
        return Py_BuildValue("(On)", cut ? Py_True : Py_False, at);
    }
    PyObject *result = Py_BuildValue(
        "(nny#y#y#y#y#y#y#y#y#)", events, kept, k.category.data ? k.category.data : "", k.category.size,
        k.name.data ? k.name.data : "", k.name.size, k.lane.data ? k.lane.data : "", k.lane.size,
        k.ts.data ? k.ts.data : "", k.ts.size, k.dur.data ? k.dur.data : "", k.dur.size,
        k.args_at.data ? k.args_at.data : "", k.args_at.size, k.args_length.data ? k.args_length.data : "",
        k.args_length.size, k.correlation.data ? k.correlation.data : "", k.correlation.size,
        k.stream.data ? k.stream.data : "", k.stream.size);
    columns_free(&k);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "The complete events of a chunk of traceEvents as columns (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
