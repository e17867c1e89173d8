/* The complete events of a chunk of a Chrome trace's ``traceEvents``, as columns, in one pass.

   What profiling/analysis/reading/trace_events.py builds from msgspec's structs, without a Python
   object per event: for each event with ``"ph": "X"`` (or an ``"i"`` named ``[memory]``, an
   allocator's instant) and a ``ts``, its category, name and
   (pid, tid) lane as codes (each distinct one kept once, as the UTF-8 of its JSON text, in the
   dicts passed in), ``ts`` and ``dur`` as doubles, where its ``args`` lie in the chunk, and
   ``args.correlation`` and ``args.stream``. Anything this scanner does not take exactly as
   msgspec would (an escaped name, a number where a string belongs, a value of another type)
   stops it: the caller then reads the whole trace the Python way, which accepts or refuses it
   as before. The rule, held by tests/test_trace_fuzz.py on malformed input: for every chunk,
   the Python reader's columns exactly, or a decline. JSON's grammar is _scan_json.h's. A chunk cut inside an event (inside a string, or inside its args) stops it at that
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

#include "_scan_json.h"

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

/* The code of ``key`` (a new reference, taken) in ``codes``, a new one where it is new; -1
   with a Python error set where one failed. */
static int32_t code_of_key(PyObject *codes, PyObject *key) {
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

/* A lane's key: the pid's text, a 0 byte, the tid's (absent: empty), of any length. */
static PyObject *lane_key(const char *pid, Py_ssize_t pid_length, const char *tid, Py_ssize_t tid_length) {
    PyObject *key = PyBytes_FromStringAndSize(NULL, pid_length + 1 + tid_length);
    if (!key) return NULL;
    char *text = PyBytes_AS_STRING(key);
    if (pid_length) memcpy(text, pid, (size_t)pid_length);
    text[pid_length] = 0;
    if (tid_length) memcpy(text + pid_length + 1, tid, (size_t)tid_length);
    return key;
}

/* ``args``' correlation and stream, at its top level (-1 where absent; a stream named by a
   string: -2). 0, or -1 where args is not an object of the kinds msgspec's reader takes, or
   has a key written with an escape (it may spell "correlation": the Python reader decides). */
static int scan_args(Cursor *c, int64_t *correlation, int64_t *stream) {
    *correlation = -1;
    *stream = -1;
    int opened = open_object(c);
    if (opened <= 0) return opened;
    while (c->p < c->end) {
        const char *key, *s;
        Py_ssize_t key_length, n;
        int escaped;
        if (member_key(c, &key, &key_length, &escaped) || escaped) return -1;
        int is_correlation = key_length == 11 && !memcmp(key, "correlation", 11);
        int is_stream = key_length == 6 && !memcmp(key, "stream", 6);
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

/* What one event says, as its members are read. */
typedef struct {
    const char *cat, *name, *pid, *tid, *args, *args_end;
    Py_ssize_t cat_length, name_length, pid_length, tid_length;
    int x, instant, has_ts;
    double ts, dur;
    int64_t correlation, stream;
} Event;

/* A pid or tid at the cursor: a string, null, or an integer msgspec reads as one. */
static int scan_lane(Cursor *c, const char **text, Py_ssize_t *length) {
    const char *start = c->p, *s;
    Py_ssize_t n;
    int64_t number;
    int escaped;
    if (*c->p == '"') {
        if (scan_string(c, &s, &n, &escaped) || escaped) return -1;
    } else if (*c->p == 'n') {
        if (skip_literal(c, "null")) return -1;
    } else if (scan_number(c, &s, &n) || parse_int(s, n, &number)) {
        return -1;
    }
    *text = start;
    *length = c->p - start;
    return 0;
}

/* The value of the member ``key`` (the cursor on it) into ``e``. 0, or -1 where the scanner
   does not take it. */
static int scan_member(Cursor *c, const char *key, Py_ssize_t key_length, Event *e) {
    const char *s;
    Py_ssize_t n;
    int escaped;
#define KEY(word) (key_length == (Py_ssize_t)sizeof(word) - 1 && !memcmp(key, word, sizeof(word) - 1))
    if (KEY("ph") || KEY("cat") || KEY("name")) {
        if (scan_string(c, &s, &n, &escaped) || escaped) return -1;
        if (KEY("ph")) {
            e->x = n == 1 && s[0] == 'X';
            e->instant = n == 1 && s[0] == 'i';
        } else if (KEY("cat")) {
            e->cat = s;
            e->cat_length = n;
        } else {
            e->name = s;
            e->name_length = n;
        }
        return 0;
    }
    if (KEY("pid")) return scan_lane(c, &e->pid, &e->pid_length);
    if (KEY("tid")) return scan_lane(c, &e->tid, &e->tid_length);
    if (KEY("ts") && *c->p == 'n') {
        e->has_ts = 0;
        return skip_literal(c, "null");
    }
    if (KEY("ts") || KEY("dur")) {
        double value;
        if (scan_number(c, &s, &n) || parse_double(s, n, &value)) return -1;
        if (KEY("ts")) {
            e->ts = value;
            e->has_ts = 1;
        } else {
            e->dur = value;
        }
        return 0;
    }
    if (KEY("args")) {
        e->args = c->p;
        if (scan_args(c, &e->correlation, &e->stream)) return -1;
        e->args_end = c->p;
        return 0;
    }
#undef KEY
    return skip_value(c, 1); /* id, bp, s, cname and the rest: not read here, as msgspec skips them */
}

/* A complete event's columns pushed. 1, or -2 (a Python error set) or -3 (no memory). */
static int push_event(const Event *e, const char *chunk, Columns *k, PyObject *categories, PyObject *names,
                      PyObject *lanes) {
    int32_t category_code = code_of_key(categories, PyBytes_FromStringAndSize(e->cat, e->cat_length));
    int32_t name_code = code_of_key(names, PyBytes_FromStringAndSize(e->name, e->name_length));
    int32_t lane_code = code_of_key(lanes, lane_key(e->pid, e->pid_length, e->tid, e->tid_length));
    if (category_code < 0 || name_code < 0 || lane_code < 0) return -2;
    int64_t at = e->args ? (int64_t)(e->args - chunk) : -1;
    int64_t length = e->args ? (int64_t)(e->args_end - e->args) : 0;
    if (column_push(&k->category, &category_code, 4) || column_push(&k->name, &name_code, 4) ||
        column_push(&k->lane, &lane_code, 4) || column_push(&k->ts, &e->ts, 8) ||
        column_push(&k->dur, &e->dur, 8) || column_push(&k->args_at, &at, 8) ||
        column_push(&k->args_length, &length, 8) || column_push(&k->correlation, &e->correlation, 8) ||
        column_push(&k->stream, &e->stream, 8))
        return -3;
    return 1;
}

/* One event at the cursor, its columns pushed if it is complete. 1: pushed, 0: not complete,
   -1: not what this scanner takes, -2 and -3 as push_event. */
static int scan_event(Cursor *c, const char *chunk, Columns *k, PyObject *categories, PyObject *names,
                      PyObject *lanes) {
    Event e = {.cat = "", .name = "", .correlation = -1, .stream = -1};
    int opened = open_object(c);
    if (opened <= 0) return opened;
    while (c->p < c->end) {
        const char *key;
        Py_ssize_t key_length;
        int escaped;
        if (member_key(c, &key, &key_length, &escaped) || escaped || c->p >= c->end) return -1;
        if (scan_member(c, key, key_length, &e)) return -1;
        int more = after_member(c, '}');
        if (more < 0) return -1;
        if (!more) break;
    }
    /* the allocator's instants (profile_memory) are kept too: the step's peak memory */
    int memory = e.instant && e.name_length == 8 && !memcmp(e.name, "[memory]", 8);
    if (!(e.x || memory) || !e.has_ts) return 0;
    return push_event(&e, chunk, k, categories, names, lanes);
}

static PyObject *columns_tuple(Py_ssize_t events, Py_ssize_t kept, Columns *k) {
    Column *all[] = {&k->category, &k->name, &k->lane, &k->ts, &k->dur,
                     &k->args_at, &k->args_length, &k->correlation, &k->stream};
    PyObject *result = PyTuple_New(11);
    if (!result) return NULL;
    PyTuple_SET_ITEM(result, 0, PyLong_FromSsize_t(events));
    PyTuple_SET_ITEM(result, 1, PyLong_FromSsize_t(kept));
    for (int i = 0; i < 9; i++)
        PyTuple_SET_ITEM(result, 2 + i, PyBytes_FromStringAndSize(all[i]->data ? all[i]->data : "", all[i]->size));
    for (int i = 0; i < 11; i++)
        if (!PyTuple_GET_ITEM(result, i)) {
            Py_DECREF(result);
            return NULL;
        }
    return result;
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
            int more = after_member(&c, ']');
            if (more < 0) failed = -1;
            else if (!more) break;
        }
    skip_space(&c);
    if (!failed && c.p != c.end) failed = -1;
    /* the chunk ends in the "]" its caller added: a failure there or past it ran into the end */
    int cut = view.len > 0 && c.p - chunk >= view.len - 1;
    Py_ssize_t at = event_start - chunk;
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (failed == -3) result = PyErr_NoMemory();
    else if (failed && !PyErr_Occurred()) result = Py_BuildValue("(On)", cut ? Py_True : Py_False, at);
    else if (!failed) result = columns_tuple(events, kept, &k);
    columns_free(&k);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "The complete events of a chunk of traceEvents as columns (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
