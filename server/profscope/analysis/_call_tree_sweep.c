/* The call tree's nesting sweep (call_tree._nest) in C: the same loop, without a Python object per event.
 *
 * sweep(order, starts, ends, tracks, node_count, root, unlinked) -> (found: bytes of int64, dropped: int)
 * The inputs are int64 arrays sorted by (track, start, longest first); order[i] is the item at position i
 * (items >= node_count are runtime calls, leaves). found[i] is the enclosing node of position i, root, or
 * unlinked for an op that starts inside the open op but ends after it. call_tree.py keeps the Python loop
 * for installs without a compiler; a test checks both give the same trees.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    Py_buffer view;
    int held;
} Column;

static int get_column(PyObject *object, Column *column, Py_ssize_t length) {
    if (PyObject_GetBuffer(object, &column->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    column->held = 1;
    const char *format = column->view.format;
    if (column->view.itemsize != 8 || format == NULL || (strcmp(format, "l") != 0 && strcmp(format, "q") != 0 &&
                                                         strcmp(format, "<q") != 0 && strcmp(format, "<l") != 0)) {
        PyErr_SetString(PyExc_TypeError, "sweep: the columns must be int64 arrays");
        return -1;
    }
    if (column->view.len / 8 != length) {
        PyErr_SetString(PyExc_ValueError, "sweep: the columns must have the same length");
        return -1;
    }
    return 0;
}

static PyObject *sweep(PyObject *module, PyObject *args) {
    PyObject *objects[4];
    Py_ssize_t node_count;
    long long root, unlinked;
    if (!PyArg_ParseTuple(args, "OOOOnLL", &objects[0], &objects[1], &objects[2], &objects[3], &node_count, &root,
                          &unlinked))
        return NULL;
    Py_buffer first;
    if (PyObject_GetBuffer(objects[0], &first, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t length = first.len / 8;
    PyBuffer_Release(&first);
    Column columns[4] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *found = NULL, *result = NULL;
    int64_t *stack_items = NULL, *stack_ends = NULL;
    for (int i = 0; i < 4; i++)
        if (get_column(objects[i], &columns[i], length) < 0) goto done;
    const int64_t *order = columns[0].view.buf, *starts = columns[1].view.buf, *ends = columns[2].view.buf,
                  *tracks = columns[3].view.buf;
    found = PyBytes_FromStringAndSize(NULL, length * 8);
    stack_items = malloc(sizeof(int64_t) * (size_t)(length + 1));
    stack_ends = malloc(sizeof(int64_t) * (size_t)(length + 1));
    if (found == NULL || stack_items == NULL || stack_ends == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int64_t *out = (int64_t *)PyBytes_AS_STRING(found);
    Py_ssize_t depth = 0, dropped = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < length; i++) {
        if (i == 0 || tracks[i] != tracks[i - 1]) depth = 0; /* a new thread: an empty stack */
        int64_t start = starts[i], stop = ends[i];
        while (depth && start >= stack_ends[depth - 1]) depth--;
        if (order[i] >= node_count) { /* a runtime call: enclosed by the open op if it ends inside it */
            out[i] = depth && stop <= stack_ends[depth - 1] ? stack_items[depth - 1] : root;
        } else if (depth && stop > stack_ends[depth - 1]) { /* starts inside the open op but ends after it */
            out[i] = unlinked;
            dropped++;
        } else {
            out[i] = depth ? stack_items[depth - 1] : root;
            stack_items[depth] = order[i];
            stack_ends[depth] = stop;
            depth++;
        }
    }
    Py_END_ALLOW_THREADS;
    result = Py_BuildValue("(On)", found, dropped);
done:
    for (int i = 0; i < 4; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    free(stack_items);
    free(stack_ends);
    Py_XDECREF(found);
    return result;
}

static PyMethodDef METHODS[] = {
    {"sweep", sweep, METH_VARARGS,
     "sweep(order, starts, ends, tracks, node_count, root, unlinked) -> (found int64 bytes, dropped)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_call_tree_sweep", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__call_tree_sweep(void) { return PyModule_Create(&MODULE); }
