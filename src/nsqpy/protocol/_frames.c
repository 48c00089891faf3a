/* NSQ message frames in C: what nsqd sends for each message it delivers.
 *
 * hex_ids(buf, start, end, step) -> list[int] reads the 16 lowercase hex digits at
 * buf[at + 4 : at + 20] for every at in range(start, end, step): the message IDs of a run of
 * "FIN <id>\n" lines (step 21) the parser has matched, as integers.
 *
 * message_frame(timestamp, attempts, id_value, body) -> bytes builds one whole frame:
 * size (int32, big-endian: what follows it), frame type 2, timestamp (int64 ns), attempts
 * (uint16), the message ID as 16 lowercase hex digits of id_value, then the body. The
 * pure-Python form is nsqpy.protocol.message.message_frame, which this must equal; it is
 * the fallback when this module is not built.
 *
 * stored_ext_frame(timestamp, attempts, id_value, body, stored) -> bytes | None builds the
 * extended frame (youzan's, for extend_support clients) of a record from its stored
 * extension (nsqpy.storage.records: trace id, key length, key, headers): version 0 when
 * stored is empty, version 4 with the headers when it holds any; None when it holds a trace
 * id or key but no headers (the caller builds that header object). The pure-Python form
 * is nsqpy.broker.extensions.py_stored_ext_frame.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEAD 34 /* size 4 + type 4 + timestamp 8 + attempts 2 + ID 16 */

static const char HEX[] = "0123456789abcdef";

static void put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* One frame: size, type 2, timestamp, attempts, the 16 hex digits of id, then pre and ext
 * (an extended frame's version, extension length and extension; or nothing), then body.
 * NULL (error set) on failure. */
static PyObject *build_frame(long long ts, long attempts, unsigned long long id,
                             const unsigned char *pre, Py_ssize_t pre_len,
                             const unsigned char *ext, Py_ssize_t ext_len, const Py_buffer *body)
{
    Py_ssize_t head_len = pre_len + ext_len;
    if (body->len > 0x7FFFFFFF - (HEAD - 4) - head_len) {
        PyErr_SetString(PyExc_ValueError, "body too large for a frame");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, HEAD + head_len + body->len);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    put_be(p, (uint64_t)(HEAD - 4 + head_len + body->len), 4);
    put_be(p + 4, 2, 4);
    put_be(p + 8, (uint64_t)ts, 8);
    put_be(p + 16, (uint64_t)attempts, 2);
    for (int i = 15; i >= 0; i--) {
        p[18 + i] = (unsigned char)HEX[id & 0xF];
        id >>= 4;
    }
    if (pre_len > 0)
        memcpy(p + HEAD, pre, (size_t)pre_len);
    if (ext_len > 0)
        memcpy(p + HEAD + pre_len, ext, (size_t)ext_len);
    memcpy(p + HEAD + head_len, body->buf, (size_t)body->len);
    return out;
}

/* The argument count (want, else TypeError with usage) and the timestamp, attempts and ID
 * arguments of both frame builders; 0, or -1 with an error set. */
static int frame_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage,
                      long long *ts, long *attempts, unsigned long long *id)
{
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *ts = PyLong_AsLongLong(args[0]);
    if (*ts == -1 && PyErr_Occurred())
        return -1;
    *attempts = PyLong_AsLong(args[1]);
    if (*attempts == -1 && PyErr_Occurred())
        return -1;
    if (*attempts < 0 || *attempts > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "attempts out of range for an unsigned 16-bit field");
        return -1;
    }
    *id = PyLong_AsUnsignedLongLong(args[2]);
    if (*id == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    return 0;
}

static PyObject *message_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long ts;
    long attempts;
    unsigned long long id;
    if (frame_args(args, nargs, 4,
                   "message_frame(timestamp, attempts, id_value, body) takes 4 arguments", &ts,
                   &attempts, &id) < 0)
        return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[3], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = build_frame(ts, attempts, id, NULL, 0, NULL, 0, &body);
    PyBuffer_Release(&body);
    return out;
}

#define EXT_FIXED 10        /* a stored extension: trace id (uint64 LE), key length (uint16 LE) */
#define JSON_HEADER_EXT 4   /* youzan's extension version of JSON headers */

static PyObject *stored_ext_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long ts;
    long attempts;
    unsigned long long id;
    if (frame_args(args, nargs, 5,
                   "stored_ext_frame(timestamp, attempts, id_value, body, stored) takes 5 "
                   "arguments", &ts, &attempts, &id) < 0)
        return NULL;
    Py_buffer body, stored;
    if (PyObject_GetBuffer(args[3], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[4], &stored, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&body);
        return NULL;
    }
    PyObject *out = NULL;
    const unsigned char *ext = (const unsigned char *)stored.buf;
    if (stored.len == 0) {
        static const unsigned char none = 0; /* version 0: no extension */
        out = build_frame(ts, attempts, id, &none, 1, NULL, 0, &body);
        goto done;
    }
    if (stored.len < EXT_FIXED)
        goto none_here;
    Py_ssize_t key_len = (Py_ssize_t)ext[8] | ((Py_ssize_t)ext[9] << 8);
    Py_ssize_t at = EXT_FIXED + key_len;
    if (at >= stored.len)
        goto none_here; /* no headers: the caller builds the header object */
    Py_ssize_t headers = stored.len - at;
    if (headers > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "extension of %zd bytes > 65535", headers);
        goto done;
    }
    unsigned char pre[3] = {JSON_HEADER_EXT, (unsigned char)(headers >> 8),
                            (unsigned char)(headers & 0xFF)};
    out = build_frame(ts, attempts, id, pre, 3, ext + at, headers, &body);
    goto done;
none_here:
    out = Py_None;
    Py_INCREF(out);
done:
    PyBuffer_Release(&stored);
    PyBuffer_Release(&body);
    return out;
}

static PyObject *hex_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "hex_ids(buf, start, end, step) takes 4 arguments");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t step = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t last = step >= 20 && end > start ? start + ((end - start - 1) / step) * step : 0;
    if (step < 20 || start < 0 || end > view.len || (end > start && last + 20 > view.len)) {
        PyErr_SetString(PyExc_ValueError, "hex_ids: the run is out of the buffer");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    const unsigned char *b = (const unsigned char *)view.buf;
    for (Py_ssize_t at = start; at < end; at += step) {
        uint64_t v = 0;
        for (int i = 4; i < 20; i++) {
            unsigned char c = b[at + i];
            unsigned d;
            if (c >= '0' && c <= '9')
                d = (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                d = (unsigned)(c - 'a' + 10);
            else {
                PyErr_SetString(PyExc_ValueError, "hex_ids: not a lowercase hex digit");
                Py_CLEAR(out);
                goto done;
            }
            v = (v << 4) | d;
        }
        PyObject *n = PyLong_FromUnsignedLongLong(v);
        if (n == NULL || PyList_Append(out, n) < 0) {
            Py_XDECREF(n);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(n);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"hex_ids", (PyCFunction)(void (*)(void))hex_ids, METH_FASTCALL,
     "hex_ids(buf, start, end, step) -> list[int]: the IDs of a matched run of FIN lines."},
    {"message_frame", (PyCFunction)(void (*)(void))message_frame, METH_FASTCALL,
     "message_frame(timestamp, attempts, id_value, body) -> bytes: one whole message frame."},
    {"stored_ext_frame", (PyCFunction)(void (*)(void))stored_ext_frame, METH_FASTCALL,
     "stored_ext_frame(timestamp, attempts, id_value, body, stored) -> bytes | None: one "
     "extended message frame from a record's stored extension (None: no headers in it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frames", "NSQ message frames in C (see nsqpy.protocol.message).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
