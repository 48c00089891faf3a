/* nsqpy.storage._speedups: the topic log's append-side encoder in C.
 *
 * Owns one function, encode_plain(bodies, base, epoch, timestamp, deliver_at) -> bytes:
 * a whole on-disk batch (header and plain records: flags 0, no extension) with every
 * CRC32C computed here. It produces exactly the bytes of the pure-Python encoder in
 * nsqpy/storage/encode.py (the layout is documented in nsqpy/storage/log.py), which
 * stays the reference and the fallback when this module is not built; tests compare
 * the two. Limits (record and batch sizes) are checked by the Python caller and again
 * here. CRC32C uses the SSE4.2 instruction when the CPU has it, else a table.
 * Imports nothing from Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_SIZE 40
#define RECORD_SIZE 38
#define RECORD_TAIL 34          /* bytes a record's length field counts besides the body */
#define RECORD_CRC_FROM 8       /* a record's CRC covers from its offset field on */
#define BATCH_CRC_FROM 8        /* a batch header's CRC covers bytes [8, 40) */
#define BATCH_MAGIC 0x3242514Eu /* "NQB2" little-endian */
#define MAX_RECORD (1u << 30)
#define MAX_BATCH 0xFFFFFFFFull

/* -- CRC32C (Castagnoli, reflected 0x82F63B78) ------------------------------------- */

static uint32_t crc_table[8][256];

static void crc_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                          size_t n)
{
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static uint32_t (*crc32c)(uint32_t, const unsigned char *, size_t) = crc_soft;

/* -- little-endian stores (the log is little-endian on every host) --------------------- */

static inline void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void put32(unsigned char *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static inline void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* -- encode_plain -------------------------------------------------------------------- */

static int get_u64(PyObject *o, const char *what, uint64_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s out of range for an unsigned 64-bit field", what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static PyObject *encode_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t base, epoch, ts, da;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_plain(bodies, base, epoch, timestamp, deliver_at) takes 5 arguments");
        return NULL;
    }
    if (get_u64(args[1], "base", &base) || get_u64(args[2], "epoch", &epoch) ||
        get_u64(args[3], "timestamp", &ts) || get_u64(args[4], "deliver_at", &da))
        return NULL;
    if (epoch > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_OverflowError, "epoch out of range for an unsigned 32-bit field");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "bodies must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    Py_ssize_t got = 0;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n == 0 || n > 0xFFFFFFFF) {
        PyErr_SetString(PyExc_ValueError, "a batch holds 1 to 4294967295 records");
        goto done;
    }
    uint64_t total = 0;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(items[got], &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        if ((uint64_t)views[got].len + RECORD_TAIL > MAX_RECORD) {
            PyErr_SetString(PyExc_ValueError, "record exceeds the size limit");
            got++;
            goto done;
        }
        total += (uint64_t)views[got].len + RECORD_SIZE;
    }
    if (total > MAX_BATCH) {
        PyErr_SetString(PyExc_ValueError, "batch exceeds the size limit");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(BATCH_SIZE + total));
    if (out == NULL)
        goto done;
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *p = buf + BATCH_SIZE;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = (size_t)views[i].len;
        put32(p, (uint32_t)(len + RECORD_TAIL));
        put64(p + 8, base + (uint64_t)i);
        put64(p + 16, ts);
        put64(p + 24, da);
        put16(p + 32, 0);
        put32(p + 34, 0);
        memcpy(p + RECORD_SIZE, views[i].buf, len);
        put32(p + 4, crc32c(0, p + RECORD_CRC_FROM, RECORD_SIZE - RECORD_CRC_FROM + len));
        p += RECORD_SIZE + len;
    }
    put32(buf, BATCH_MAGIC);
    put64(buf + 8, base);
    put32(buf + 16, (uint32_t)epoch);
    put32(buf + 20, (uint32_t)n);
    put32(buf + 24, (uint32_t)total);
    put32(buf + 28, crc32c(0, buf + BATCH_SIZE, (size_t)total));
    put64(buf + 32, ts);
    put32(buf + 4, crc32c(0, buf + BATCH_CRC_FROM, BATCH_SIZE - BATCH_CRC_FROM));
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

static PyObject *py_crc32c(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32c(0, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"encode_plain", (PyCFunction)(void (*)(void))encode_plain, METH_FASTCALL,
     "encode_plain(bodies, base, epoch, timestamp, deliver_at) -> bytes: one whole batch of "
     "plain records (flags 0, no extension), CRCs included."},
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> int: the CRC32C this module computes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The topic log's append-side encoder in C (see nsqpy.storage.encode).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init_table();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c = crc_hw;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "crc_impl", crc32c == crc_soft ? "table" : "sse4.2") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
