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

static PyObject *message_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "message_frame(timestamp, attempts, id_value, body) takes 4 arguments");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    long attempts = PyLong_AsLong(args[1]);
    if (attempts == -1 && PyErr_Occurred())
        return NULL;
    if (attempts < 0 || attempts > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "attempts out of range for an unsigned 16-bit field");
        return NULL;
    }
    unsigned long long id = PyLong_AsUnsignedLongLong(args[2]);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[3], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    if (body.len > 0x7FFFFFFF - (HEAD - 4)) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_ValueError, "body too large for a frame");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, HEAD + body.len);
    if (out != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        put_be(p, (uint64_t)(HEAD - 4 + body.len), 4);
        put_be(p + 4, 2, 4);
        put_be(p + 8, (uint64_t)ts, 8);
        put_be(p + 16, (uint64_t)attempts, 2);
        for (int i = 15; i >= 0; i--) {
            p[18 + i] = (unsigned char)HEX[id & 0xF];
            id >>= 4;
        }
        memcpy(p + HEAD, body.buf, (size_t)body.len);
    }
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frames", "NSQ message frames in C (see nsqpy.protocol.message).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
