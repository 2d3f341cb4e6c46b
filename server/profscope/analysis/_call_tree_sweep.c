/* The call tree's nesting sweep (call_tree._nest) in C: the same loop, without a Python object per event.
 *
 * nest_in_row_order(ts, dur, track, host_rows, runtime_rows, root, unlinked) -> (found, dropped) or None: the
 * same nesting straight from the event rows when they are in (start, longest first) order, as ingest leaves
 * them: one stack per thread instead of a sort of every row by (thread, start, longest first), ~0.3 s of the
 * 1.2 s tree of a 1 GB trace. found[i] is the enclosing node of host node i (host_rows[i]), then of each
 * runtime call. None when the rows are not in that order (call_tree then sorts them).
 *
 * lane_depths(start, end) -> depth (int32 bytearray) or None: timeline_index.lane_depths of one track's slices
 * in start order in one pass (a heap of open ends) instead of a sort, a binary search per slice and a sort by
 * depth to check the rows; None when the starts are not sorted (lane_depths then does it in numpy).
 *
 * tree_down(parent, is_row, host_total, root) and tree_up(parent, is_cpu_op, device_total, tc_total, tc_eligible):
 * call_tree's passes over the tree (nearest operator row above each node and the host time each node gives to
 * what is below it; device and tensor-core totals summed to the roots) as one loop over the nodes, when every
 * parent comes before its children (the nodes of nest_in_row_order do): no depth of every node, no grouping by
 * depth, no ufunc.at per level. tree_down returns None, tree_up False (arrays untouched) when a parent does not.
 *
 * merge_aliases(parent, is_cpu_op, names) -> alias or None: call_tree._merge_single_same_name_children in two
 * loops over nodes whose parents come first (the child counts, then each node's alias from its parent's).
 *
 * merge_levels(thresholds, state, lane_first, name, start, end, first_cut, last, wanted, out_cuts, out_names) ->
 * the count of items each level closed: timeline_index._build_levels streamed. The raw slices come a block at a
 * time (positions first_cut...); each is fed to level 1, and an item a level closes (where a gap or a lone wide
 * slice breaks, or a lane starts) is final and fed to the next level. `state` (LEVEL_STATE int64 per level) holds
 * each level's open item from one block to the next; `last`: the last block, whose open items are closed too.
 * Closed items of the levels `wanted` flags are written (cut, name) to row `level` of out_cuts / out_names, rows of
 * count + levels + 1 (None: counted only). No level is ever held whole: memory is the block's.
 *
 * merge_flagged(ts, dur, flags, set_count) -> [(starts, ends)] * set_count or None: intervals.merge_each, the union
 * of the intervals [ts, ts + dur) of the rows flagged for each set (bit k of flags: set k), in one pass over rows
 * sorted by start (the events table's): per set a running end, a new interval where a row starts after it. None
 * when a set's starts are not sorted (intervals.merge then sorts them).
 *
 * paint_normalised(sets) -> [(starts, ends)] * len(sets) or None: intervals.paint of normalised sets (the window
 * first, then the layers by priority) in one sweep over their bounds in order, each set's bounds read as one
 * sorted sequence (start, end, start, ...): the owner of each stretch between two bounds, and a share for each
 * run of stretches of one owner. None when a set is not normalised (sorted, disjoint, non-empty intervals).
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

/* A 1-D integer column of `itemsize` bytes (8: int64, 4: int32, 0: either); length -1: any; flags: extra buffer
 * flags (PyBUF_WRITABLE for a column written in place). */
static int get_column_of(PyObject *object, Column *column, Py_ssize_t length, Py_ssize_t itemsize, int flags) {
    if (PyObject_GetBuffer(object, &column->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | flags) < 0) return -1;
    column->held = 1;
    const char *format = column->view.format;
    if (format != NULL && (format[0] == '<' || format[0] == '=')) format++;
    Py_ssize_t size = column->view.itemsize;
    int is_int = format != NULL && ((size == 8 && (strcmp(format, "l") == 0 || strcmp(format, "q") == 0)) ||
                                    (size == 4 && (strcmp(format, "i") == 0 || strcmp(format, "l") == 0)));
    if (!is_int || (itemsize && size != itemsize)) {
        PyErr_SetString(PyExc_TypeError, itemsize == 4   ? "the columns must be int32 arrays"
                                         : itemsize == 8 ? "the columns must be int64 arrays"
                                                         : "the columns must be int32 or int64 arrays");
        return -1;
    }
    if (length >= 0 && column->view.len / size != length) {
        PyErr_SetString(PyExc_ValueError, "the columns must have the same length");
        return -1;
    }
    return 0;
}

static int get_int_column(PyObject *object, Column *column, Py_ssize_t length, Py_ssize_t itemsize) {
    return get_column_of(object, column, length, itemsize, 0);
}

static int get_column(PyObject *object, Column *column, Py_ssize_t length) {
    return get_int_column(object, column, length, 8);
}

static inline int64_t column_at(const Column *column, Py_ssize_t i) {
    return column->view.itemsize == 4 ? (int64_t)((const int32_t *)column->view.buf)[i]
                                      : ((const int64_t *)column->view.buf)[i];
}

/* One stack per track, grown on demand. */
typedef struct {
    int64_t *items, *ends;
    Py_ssize_t depth, capacity;
} Stack;

static int push(Stack *stack, int64_t item, int64_t end) {
    if (stack->depth == stack->capacity) {
        Py_ssize_t capacity = stack->capacity ? 2 * stack->capacity : 16;
        int64_t *items = realloc(stack->items, sizeof(int64_t) * (size_t)capacity);
        if (items == NULL) return -1;
        stack->items = items;
        int64_t *ends = realloc(stack->ends, sizeof(int64_t) * (size_t)capacity);
        if (ends == NULL) return -1;
        stack->ends = ends;
        stack->capacity = capacity;
    }
    stack->items[stack->depth] = item;
    stack->ends[stack->depth] = end;
    stack->depth++;
    return 0;
}

static void free_stacks(Stack *stacks, Py_ssize_t count) {
    if (stacks == NULL) return;
    for (Py_ssize_t i = 0; i < count; i++) {
        free(stacks[i].items);
        free(stacks[i].ends);
    }
    free(stacks);
}

/* The stacks of tracks 0..max(track) (NULL with an exception set when a track id is negative or memory runs
 * out); *count receives their number. */
static Stack *new_stacks(const Column *track, Py_ssize_t length, Py_ssize_t *count) {
    int64_t high = -1;
    for (Py_ssize_t i = 0; i < length; i++) {
        int64_t value = column_at(track, i);
        if (value < 0) {
            PyErr_SetString(PyExc_ValueError, "track ids must not be negative");
            return NULL;
        }
        if (value > high) high = value;
    }
    *count = (Py_ssize_t)(high + 1);
    Stack *stacks = calloc((size_t)(high + 2), sizeof(Stack));
    if (stacks == NULL) PyErr_NoMemory();
    return stacks;
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

static PyObject *nest_in_row_order(PyObject *module, PyObject *args) {
    PyObject *objects[5];
    long long root, unlinked;
    if (!PyArg_ParseTuple(args, "OOOOOLL", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4], &root,
                          &unlinked))
        return NULL;
    Column columns[5] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *found = NULL, *result = NULL;
    int64_t *item_of_row = NULL;
    Stack *stacks = NULL;
    Py_ssize_t track_count = 0;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t rows = columns[0].view.len / 8;
    if (get_int_column(objects[1], &columns[1], rows, 8) < 0 || get_int_column(objects[2], &columns[2], rows, 0) < 0 ||
        get_int_column(objects[3], &columns[3], -1, 8) < 0 || get_int_column(objects[4], &columns[4], -1, 8) < 0)
        goto done;
    const int64_t *ts = columns[0].view.buf, *dur = columns[1].view.buf, *host = columns[3].view.buf,
                  *runtime = columns[4].view.buf;
    Py_ssize_t node_count = columns[3].view.len / 8, total = node_count + columns[4].view.len / 8;
    item_of_row = malloc(sizeof(int64_t) * (size_t)(rows + 1));
    found = PyBytes_FromStringAndSize(NULL, total * 8);
    if (item_of_row == NULL || found == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < rows; i++) item_of_row[i] = -1;
    for (Py_ssize_t i = 0; i < total; i++) {
        int64_t row = i < node_count ? host[i] : runtime[i - node_count];
        if (row < 0 || row >= rows) {
            PyErr_SetString(PyExc_IndexError, "nest_in_row_order: a row is out of range");
            goto done;
        }
        item_of_row[row] = i;
    }
    int64_t *out = (int64_t *)PyBytes_AS_STRING(found);
    /* in (start, longest first) order? Rows equal in both are taken host ops first, each kind in row order:
     * call_tree's sort breaks such ties by (host rows, then runtime rows). */
    int64_t previous_ts = INT64_MIN, previous_dur = INT64_MAX;
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (item_of_row[i] < 0) continue;
        if (ts[i] < previous_ts || (ts[i] == previous_ts && dur[i] > previous_dur)) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        previous_ts = ts[i];
        previous_dur = dur[i];
    }
    stacks = new_stacks(&columns[2], rows, &track_count);
    if (stacks == NULL) goto done;
    Py_ssize_t dropped = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t run_start = 0;
    while (run_start < rows && !failed) {
        while (run_start < rows && item_of_row[run_start] < 0) run_start++;
        if (run_start == rows) break;
        Py_ssize_t run_end = run_start + 1; /* past the rows (of either kind) with this start and duration */
        while (run_end < rows && (item_of_row[run_end] < 0 || (ts[run_end] == ts[run_start] && dur[run_end] == dur[run_start])))
            run_end++;
        while (run_end > run_start + 1 && item_of_row[run_end - 1] < 0) run_end--;
        for (int runtime_pass = 0; runtime_pass < 2 && !failed; runtime_pass++) {
            for (Py_ssize_t i = run_start; i < run_end; i++) {
                int64_t item = item_of_row[i];
                if (item < 0 || (item >= node_count) != runtime_pass) continue;
                Stack *stack = &stacks[column_at(&columns[2], i)];
                int64_t start = ts[i], stop = ts[i] + dur[i];
                while (stack->depth && start >= stack->ends[stack->depth - 1]) stack->depth--;
                int64_t top_end = stack->depth ? stack->ends[stack->depth - 1] : 0;
                int64_t top_item = stack->depth ? stack->items[stack->depth - 1] : root;
                if (runtime_pass) { /* a runtime call: enclosed by the open op if it ends inside it */
                    out[item] = stack->depth && stop <= top_end ? top_item : root;
                } else if (stack->depth && stop > top_end) { /* starts inside the open op but ends after it */
                    out[item] = unlinked;
                    dropped++;
                } else {
                    out[item] = top_item;
                    if (push(stack, item, stop) < 0) failed = 1;
                }
            }
        }
        run_start = run_end;
    }
    Py_END_ALLOW_THREADS;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(On)", found, dropped);
done:
    for (int i = 0; i < 5; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    free(item_of_row);
    free_stacks(stacks, track_count);
    Py_XDECREF(found);
    return result;
}

/* Restores the min-heap property from the root down after the root was replaced. */
static void sift_down(int64_t *heap, Py_ssize_t size) {
    Py_ssize_t i = 0;
    int64_t value = heap[0];
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= size) break;
        if (child + 1 < size && heap[child + 1] < heap[child]) child++;
        if (heap[child] >= value) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = value;
}

static void heap_push(int64_t *heap, Py_ssize_t size, int64_t value) {
    Py_ssize_t i = size;
    while (i > 0 && heap[(i - 1) / 2] > value) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = value;
}

/* timeline_index.lane_depths for slices in start order: the count of earlier slices still open (a min-heap of
 * their ends), kept when no two slices of a row overlap, else the lowest free row. Returns 0, or -1 when the
 * starts are not sorted (depth untouched), -2 when memory ran out. */
static int lane_depths_sorted(const int64_t *start, const int64_t *end, Py_ssize_t count, int32_t *depth) {
    for (Py_ssize_t i = 1; i < count; i++)
        if (start[i] < start[i - 1]) return -1;
    int64_t *heap = malloc(sizeof(int64_t) * (size_t)(count + 1));
    int64_t *row_end = malloc(sizeof(int64_t) * (size_t)(count + 1));
    if (heap == NULL || row_end == NULL) {
        free(heap);
        free(row_end);
        return -2;
    }
    Py_ssize_t open = 0, rows = 0;
    int disjoint = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t s = start[i], layout_end = end[i] > s + 1 ? end[i] : s + 1; /* zero-length: a nanosecond */
        while (open && heap[0] <= s) { /* earlier slices closed by now */
            heap[0] = heap[--open];
            if (open) sift_down(heap, open);
        }
        depth[i] = (int32_t)open;
        if (open == rows) row_end[rows++] = layout_end;
        else if (s >= row_end[open]) row_end[open] = layout_end;
        else { /* overlaps the slice before it on its row */
            disjoint = 0;
            break;
        }
        heap_push(heap, open++, layout_end);
    }
    if (!disjoint) { /* the rows greedily: each slice on the lowest row free at its start */
        rows = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t s = start[i], layout_end = end[i] > s + 1 ? end[i] : s + 1;
            Py_ssize_t row = 0;
            while (row < rows && row_end[row] > s) row++;
            if (row == rows) rows++;
            row_end[row] = layout_end;
            depth[i] = (int32_t)row;
        }
    }
    free(heap);
    free(row_end);
    return 0;
}

static PyObject *lane_depths(PyObject *module, PyObject *args) {
    PyObject *objects[2];
    if (!PyArg_ParseTuple(args, "OO", &objects[0], &objects[1])) return NULL;
    Column columns[2] = {{.held = 0}, {.held = 0}};
    PyObject *depth_bytes = NULL, *result = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t count = columns[0].view.len / 8;
    if (get_int_column(objects[1], &columns[1], count, 8) < 0) goto done;
    depth_bytes = PyByteArray_FromStringAndSize(NULL, count * 4);
    if (depth_bytes == NULL) goto done;
    int32_t *depth = (int32_t *)PyByteArray_AS_STRING(depth_bytes);
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = lane_depths_sorted(columns[0].view.buf, columns[1].view.buf, count, depth);
    Py_END_ALLOW_THREADS;
    if (status == -2) {
        PyErr_NoMemory();
        goto done;
    }
    result = status == 0 ? depth_bytes : Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < 2; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    Py_XDECREF(depth_bytes);
    return result;
}

/* A 1-D bool column (numpy's '?'), writable when asked. */
static int get_bool_column(PyObject *object, Column *column, Py_ssize_t length, int writable) {
    if (PyObject_GetBuffer(object, &column->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) <
        0)
        return -1;
    column->held = 1;
    if (column->view.itemsize != 1 || column->view.format == NULL || strcmp(column->view.format, "?") != 0) {
        PyErr_SetString(PyExc_TypeError, "the flags must be bool arrays");
        return -1;
    }
    if (column->view.len != length) {
        PyErr_SetString(PyExc_ValueError, "the columns must have the same length");
        return -1;
    }
    return 0;
}

/* Whether every node's parent comes before it (parent[n] < n, negative for none): then one pass in index order
 * visits parents before their children, and one in reverse order children before their parents. */
static int parents_first(const int64_t *parent, Py_ssize_t count) {
    for (Py_ssize_t n = 0; n < count; n++)
        if (parent[n] >= n) return 0;
    return 1;
}

static PyObject *tree_down(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    long long root;
    if (!PyArg_ParseTuple(args, "OOOL", &objects[0], &objects[1], &objects[2], &root)) return NULL;
    Column columns[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *owner_bytes = NULL, *children_bytes = NULL, *result = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t count = columns[0].view.len / 8;
    if (get_bool_column(objects[1], &columns[1], count, 0) < 0 || get_int_column(objects[2], &columns[2], count, 8) < 0)
        goto done;
    const int64_t *parent = columns[0].view.buf, *host_total = columns[2].view.buf;
    const char *is_row = columns[1].view.buf;
    if (!parents_first(parent, count)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    owner_bytes = PyByteArray_FromStringAndSize(NULL, count * 8);
    children_bytes = PyByteArray_FromStringAndSize(NULL, count * 8);
    if (owner_bytes == NULL || children_bytes == NULL) goto done;
    int64_t *owner = (int64_t *)PyByteArray_AS_STRING(owner_bytes);
    int64_t *children = (int64_t *)PyByteArray_AS_STRING(children_bytes);
    Py_BEGIN_ALLOW_THREADS;
    memset(children, 0, sizeof(int64_t) * (size_t)count);
    for (Py_ssize_t n = 0; n < count; n++) {
        int64_t p = parent[n];
        owner[n] = is_row[n] ? n : p >= 0 ? owner[p] : root;
        if (p < 0) continue;
        if (!is_row[p]) children[p] += host_total[n]; /* a non-row gives its time to its children */
        if (is_row[n] && owner[p] >= 0) children[owner[p]] += host_total[n]; /* a row, to the rows nearest below */
    }
    Py_END_ALLOW_THREADS;
    result = Py_BuildValue("(OO)", owner_bytes, children_bytes);
done:
    for (int i = 0; i < 3; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    Py_XDECREF(owner_bytes);
    Py_XDECREF(children_bytes);
    return result;
}

static PyObject *tree_up(PyObject *module, PyObject *args) {
    PyObject *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4]))
        return NULL;
    Column columns[5] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *result = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t count = columns[0].view.len / 8;
    if (get_bool_column(objects[1], &columns[1], count, 0) < 0) goto done;
    for (int i = 2; i < 4; i++)
        if (get_column_of(objects[i], &columns[i], count, 8, PyBUF_WRITABLE) < 0) goto done;
    if (get_bool_column(objects[4], &columns[4], count, 1) < 0) goto done;
    const int64_t *parent = columns[0].view.buf;
    const char *is_cpu_op = columns[1].view.buf;
    int64_t *device_total = columns[2].view.buf, *tc_total = columns[3].view.buf;
    char *tc_eligible = columns[4].view.buf;
    if (!parents_first(parent, count)) {
        result = Py_False;
        Py_INCREF(result);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t n = count - 1; n >= 0; n--) { /* children first: a node's sums are final when it is reached */
        int64_t p = parent[n];
        if (p < 0) continue;
        device_total[p] += device_total[n];
        tc_total[p] += tc_total[n];
        if (tc_eligible[n] && is_cpu_op[p]) tc_eligible[p] = 1;
    }
    Py_END_ALLOW_THREADS;
    result = Py_True;
    Py_INCREF(result);
done:
    for (int i = 0; i < 5; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    return result;
}

/* merge_levels: one level's open item (the group being merged into) and what the next item is compared with */
enum { HAS_GROUP, GROUP_START, GROUP_END, GROUP_BUSY, GROUP_SLICES, GROUP_CUT, BEST_BUSY, BEST_NAME, GROUP_LANE_FIRST,
       PREVIOUS_WIDE, LEVEL_STATE };

typedef struct {
    int64_t start, end, busy, slices, cut, name, lane_first;
} LevelItem;

typedef struct {
    const int64_t *thresholds;
    int64_t *state; /* LEVEL_STATE values per level */
    int64_t *counts;
    int64_t *out_cuts; /* NULL: counts only */
    int32_t *out_names;
    const char *wanted; /* per level: its items written out */
    Py_ssize_t levels, capacity;
} Levels;

/* The item a level's state has open */
static inline LevelItem open_item(const int64_t *state) {
    return (LevelItem){state[GROUP_START], state[GROUP_END], state[GROUP_BUSY],       state[GROUP_SLICES],
                       state[GROUP_CUT],   state[BEST_NAME], state[GROUP_LANE_FIRST]};
}

/* `closed`, final at level `level`: counted, and written out if the level's items are wanted */
static inline void record_closed(Levels *levels, Py_ssize_t level, LevelItem closed) {
    if (levels->out_cuts != NULL && levels->wanted[level]) {
        Py_ssize_t at = level * levels->capacity + levels->counts[level];
        levels->out_cuts[at] = closed.cut;
        levels->out_names[at] = (int32_t)closed.name;
    }
    levels->counts[level]++;
}

/* `item` (final at level `level` - 1) fed to level `level`; a group it closes is final there and fed to the next */
static void feed_level(Levels *levels, Py_ssize_t level, LevelItem item) {
    for (; level < levels->levels; level++) {
        int64_t *state = levels->state + level * LEVEL_STATE, threshold = levels->thresholds[level];
        int wide = item.slices == 1 && item.end - item.start >= threshold;
        int has_closed = 0;
        LevelItem closed;
        if (!state[HAS_GROUP] || item.lane_first || wide || state[PREVIOUS_WIDE] ||
            item.start - state[GROUP_END] >= threshold) {
            if (state[HAS_GROUP]) {
                closed = open_item(state);
                has_closed = 1;
            }
            state[HAS_GROUP] = 1;
            state[GROUP_START] = item.start;
            state[GROUP_BUSY] = 0;
            state[GROUP_SLICES] = 0;
            state[GROUP_CUT] = item.cut;
            state[GROUP_LANE_FIRST] = item.lane_first;
            state[BEST_BUSY] = item.busy;
            state[BEST_NAME] = item.name;
        } else if (item.busy > state[BEST_BUSY]) { /* the first item of the most busy time names the merged one */
            state[BEST_BUSY] = item.busy;
            state[BEST_NAME] = item.name;
        }
        state[GROUP_BUSY] += item.busy;
        state[GROUP_SLICES] += item.slices;
        state[GROUP_END] = item.end;
        state[PREVIOUS_WIDE] = wide;
        if (!has_closed) return;
        record_closed(levels, level, closed);
        item = closed;
    }
}

/* Every level's open group closed, the finer levels first (each feeds the next) */
static void close_levels(Levels *levels) {
    for (Py_ssize_t level = 0; level < levels->levels; level++) {
        int64_t *state = levels->state + level * LEVEL_STATE;
        if (!state[HAS_GROUP]) continue;
        state[HAS_GROUP] = 0;
        LevelItem closed = open_item(state);
        record_closed(levels, level, closed);
        feed_level(levels, level + 1, closed);
    }
}

static PyObject *merge_levels(PyObject *module, PyObject *args) {
    PyObject *objects[9];
    long long first_cut;
    int last;
    if (!PyArg_ParseTuple(args, "OOOOOOLpOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &first_cut, &last, &objects[6], &objects[7], &objects[8]))
        return NULL;
    /* thresholds, state, lane_first, name, start, end; out_wanted, out_cuts, out_names (None: counts only) */
    Column columns[9] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0},
                         {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *result = NULL;
    int64_t *counts = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t level_count = columns[0].view.len / 8;
    if (get_column_of(objects[1], &columns[1], level_count * LEVEL_STATE, 8, PyBUF_WRITABLE) < 0) goto done;
    if (PyObject_GetBuffer(objects[2], &columns[2].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    columns[2].held = 1;
    if (columns[2].view.itemsize != 1 || columns[2].view.format == NULL || strcmp(columns[2].view.format, "?") != 0) {
        PyErr_SetString(PyExc_TypeError, "merge_levels: lane_first must be a bool array");
        goto done;
    }
    Py_ssize_t count = columns[2].view.len;
    if (get_int_column(objects[3], &columns[3], count, 4) < 0 || get_int_column(objects[4], &columns[4], count, 8) < 0 ||
        get_int_column(objects[5], &columns[5], count, 8) < 0)
        goto done;
    int writing = objects[6] != Py_None;
    Py_ssize_t capacity = 0;
    if (writing) {
        if (PyObject_GetBuffer(objects[6], &columns[6].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        columns[6].held = 1;
        if (columns[6].view.itemsize != 1 || columns[6].view.len != level_count) {
            PyErr_SetString(PyExc_ValueError, "merge_levels: one wanted flag per level");
            goto done;
        }
        if (get_column_of(objects[7], &columns[7], -1, 8, PyBUF_WRITABLE) < 0 ||
            get_column_of(objects[8], &columns[8], -1, 4, PyBUF_WRITABLE) < 0)
            goto done;
        /* one row per level; a level closes at most one item per item fed to it, and its last */
        capacity = level_count ? columns[7].view.len / 8 / level_count : 0;
        if (level_count && (columns[7].view.len != level_count * capacity * 8 ||
                            columns[8].view.len != level_count * capacity * 4 || capacity < count + level_count + 1)) {
            PyErr_SetString(PyExc_ValueError, "merge_levels: the outputs need a row of count + levels + 1 per level");
            goto done;
        }
    }
    counts = calloc((size_t)(level_count ? level_count : 1), sizeof(int64_t));
    if (counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Levels levels = {columns[0].view.buf, columns[1].view.buf, counts, writing ? columns[7].view.buf : NULL,
                     writing ? columns[8].view.buf : NULL, writing ? columns[6].view.buf : NULL, level_count, capacity};
    const char *lane_first = columns[2].view.buf;
    const int32_t *name = columns[3].view.buf;
    const int64_t *start = columns[4].view.buf, *end = columns[5].view.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < count; i++) {
        LevelItem item = {start[i], end[i], end[i] - start[i], 1, first_cut + i, name[i], lane_first[i]};
        feed_level(&levels, 0, item);
    }
    if (last) close_levels(&levels);
    Py_END_ALLOW_THREADS;
    result = PyTuple_New(level_count);
    if (result == NULL) goto done;
    for (Py_ssize_t level = 0; level < level_count; level++) {
        PyObject *value = PyLong_FromLongLong(counts[level]);
        if (value == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, level, value);
    }
done:
    free(counts);
    for (int i = 0; i < 9; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    return result;
}

static PyObject *merge_aliases(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, "OOO", &objects[0], &objects[1], &objects[2])) return NULL;
    Column columns[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    PyObject *alias_bytes = NULL, *result = NULL;
    int64_t *child_count = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t count = columns[0].view.len / 8;
    if (get_bool_column(objects[1], &columns[1], count, 0) < 0 || get_int_column(objects[2], &columns[2], count, 0) < 0)
        goto done;
    const int64_t *parent = columns[0].view.buf;
    const char *is_cpu_op = columns[1].view.buf;
    if (!parents_first(parent, count)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    child_count = calloc((size_t)count + 1, sizeof(int64_t));
    alias_bytes = PyByteArray_FromStringAndSize(NULL, count * 8);
    if (child_count == NULL || alias_bytes == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int64_t *alias = (int64_t *)PyByteArray_AS_STRING(alias_bytes);
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t n = 0; n < count; n++)
        if (parent[n] >= 0) child_count[parent[n]]++;
    for (Py_ssize_t n = 0; n < count; n++) { /* the parent's alias is final already: a chain collapses to its top */
        int64_t p = parent[n];
        int merged = p >= 0 && child_count[p] == 1 && is_cpu_op[n] && is_cpu_op[p] &&
                     column_at(&columns[2], n) == column_at(&columns[2], p);
        alias[n] = merged ? alias[p] : n;
    }
    Py_END_ALLOW_THREADS;
    result = alias_bytes;
    Py_INCREF(result);
done:
    for (int i = 0; i < 3; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    free(child_count);
    Py_XDECREF(alias_bytes);
    return result;
}

/* An int64 array grown as values come (no GIL needed); handed to Python as a bytearray once complete. */
typedef struct {
    int64_t *values;
    Py_ssize_t count, capacity;
} Growing;

static int grow_append(Growing *growing, int64_t value) {
    if (growing->count == growing->capacity) {
        Py_ssize_t capacity = growing->capacity ? 2 * growing->capacity : 1024;
        int64_t *values = realloc(growing->values, sizeof(int64_t) * (size_t)capacity);
        if (values == NULL) return -1;
        growing->values = values;
        growing->capacity = capacity;
    }
    growing->values[growing->count++] = value;
    return 0;
}

/* [(starts, ends)] as bytearrays of int64 from pairs of growing arrays (NULL with an exception set). */
static PyObject *interval_sets(Growing *starts, Growing *ends, Py_ssize_t count) {
    PyObject *list = PyList_New(count);
    if (list == NULL) return NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *pair = Py_BuildValue("(NN)",
                                       PyByteArray_FromStringAndSize((const char *)starts[k].values, starts[k].count * 8),
                                       PyByteArray_FromStringAndSize((const char *)ends[k].values, ends[k].count * 8));
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, pair);
    }
    return list;
}

static void free_growing(Growing *growing, Py_ssize_t count) {
    if (growing == NULL) return;
    for (Py_ssize_t k = 0; k < count; k++) free(growing[k].values);
}

#define MAX_FLAGGED_SETS 8
#define MAX_PAINTED_SETS 16

static PyObject *merge_flagged(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    int set_count;
    if (!PyArg_ParseTuple(args, "OOOi", &objects[0], &objects[1], &objects[2], &set_count)) return NULL;
    if (set_count < 1 || set_count > MAX_FLAGGED_SETS) {
        PyErr_SetString(PyExc_ValueError, "merge_flagged: 1 to 8 sets");
        return NULL;
    }
    Column columns[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    Growing starts[MAX_FLAGGED_SETS] = {{0}}, ends[MAX_FLAGGED_SETS] = {{0}};
    PyObject *result = NULL;
    if (get_int_column(objects[0], &columns[0], -1, 8) < 0) goto done;
    Py_ssize_t rows = columns[0].view.len / 8;
    if (get_int_column(objects[1], &columns[1], rows, 8) < 0) goto done;
    if (PyObject_GetBuffer(objects[2], &columns[2].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    columns[2].held = 1;
    if (columns[2].view.itemsize != 1 || columns[2].view.format == NULL || strcmp(columns[2].view.format, "B") != 0 ||
        columns[2].view.len != rows) {
        PyErr_SetString(PyExc_TypeError, "merge_flagged: the flags must be a uint8 array, one per row");
        goto done;
    }
    const int64_t *ts = columns[0].view.buf, *dur = columns[1].view.buf;
    const uint8_t *flags = columns[2].view.buf;
    int status = 0; /* 0, 1: a set's starts are not sorted, -1: out of memory */
    Py_BEGIN_ALLOW_THREADS;
    int64_t running_end[MAX_FLAGGED_SETS], last_start[MAX_FLAGGED_SETS];
    for (Py_ssize_t i = 0; i < rows && status == 0; i++) {
        unsigned bits = flags[i] & ((1u << set_count) - 1);
        if (!bits) continue;
        int64_t start = ts[i], end = (int64_t)((uint64_t)start + (uint64_t)dur[i]); /* numpy's wrapping sum */
        if (end <= start) continue; /* an empty interval: merge leaves it out */
        for (int k = 0; bits; k++, bits >>= 1) {
            if (!(bits & 1)) continue;
            Py_ssize_t count = starts[k].count;
            if (count && start < last_start[k]) { /* not sorted by start */
                status = 1;
                break;
            }
            last_start[k] = start;
            if (count && start <= running_end[k]) { /* overlaps or touches what is open: extends it */
                if (end > running_end[k]) running_end[k] = end;
                continue;
            }
            if (count && grow_append(&ends[k], running_end[k]) < 0) status = -1;
            if (grow_append(&starts[k], start) < 0) status = -1;
            running_end[k] = end;
        }
    }
    for (int k = 0; k < set_count && status == 0; k++)
        if (starts[k].count && grow_append(&ends[k], running_end[k]) < 0) status = -1;
    Py_END_ALLOW_THREADS;
    if (status < 0) {
        PyErr_NoMemory();
    } else if (status > 0) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = interval_sets(starts, ends, set_count);
    }
done:
    for (int i = 0; i < 3; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    free_growing(starts, MAX_FLAGGED_SETS);
    free_growing(ends, MAX_FLAGGED_SETS);
    return result;
}

/* Whether a set is normalised: sorted, disjoint (touching allowed) and non-empty intervals. */
static int is_normalised(const int64_t *starts, const int64_t *ends, Py_ssize_t count) {
    for (Py_ssize_t j = 0; j < count; j++) {
        if (ends[j] <= starts[j]) return 0;
        if (j && starts[j] < ends[j - 1]) return 0;
    }
    return 1;
}

static PyObject *paint_normalised(PyObject *module, PyObject *args) {
    PyObject *given;
    if (!PyArg_ParseTuple(args, "O", &given)) return NULL;
    PyObject *sets = PySequence_Fast(given, "paint_normalised: a sequence of (starts, ends) pairs");
    if (sets == NULL) return NULL;
    Py_ssize_t set_count = PySequence_Fast_GET_SIZE(sets);
    Column columns[2 * MAX_PAINTED_SETS];
    for (int i = 0; i < 2 * MAX_PAINTED_SETS; i++) columns[i].held = 0;
    Growing starts[MAX_PAINTED_SETS] = {{0}}, ends[MAX_PAINTED_SETS] = {{0}};
    PyObject *result = NULL;
    if (set_count < 1 || set_count > MAX_PAINTED_SETS) {
        PyErr_SetString(PyExc_ValueError, "paint_normalised: a window and at most 15 layers");
        goto done;
    }
    const int64_t *bounds[MAX_PAINTED_SETS][2];
    Py_ssize_t lengths[MAX_PAINTED_SETS], next[MAX_PAINTED_SETS];
    int normalised = 1;
    for (Py_ssize_t k = 0; k < set_count; k++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(sets, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "paint_normalised: each set is a (starts, ends) tuple");
            goto done;
        }
        if (get_int_column(PyTuple_GET_ITEM(pair, 0), &columns[2 * k], -1, 8) < 0) goto done;
        lengths[k] = columns[2 * k].view.len / 8;
        if (get_int_column(PyTuple_GET_ITEM(pair, 1), &columns[2 * k + 1], lengths[k], 8) < 0) goto done;
        bounds[k][0] = columns[2 * k].view.buf;
        bounds[k][1] = columns[2 * k + 1].view.buf;
        next[k] = 0; /* the index of the set's next bound: 2j the start of interval j, 2j + 1 its end */
        normalised = normalised && is_normalised(bounds[k][0], bounds[k][1], lengths[k]);
    }
    if (!normalised) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    Py_ssize_t layers = set_count - 1;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS;
    /* set k's bounds in order: 2j the start of its interval j, 2j + 1 its end; next[k] the first not passed */
#define BOUND(k, i) ((i) & 1 ? bounds[k][1][(i) >> 1] : bounds[k][0][(i) >> 1])
    unsigned covered = 0;  /* bit k: set k covers the stretch that starts at the bound just passed */
    Py_ssize_t owner = -1; /* of the run open: a layer, `layers` (none covers it) or -1 (outside the window) */
#define NEW_OWNER(point)                                                                                        \
    do {                                                                                                        \
        unsigned layer_bits = covered >> 1;                                                                     \
        Py_ssize_t now = !(covered & 1) ? -1 : layer_bits ? (Py_ssize_t)__builtin_ctz(layer_bits) : layers;      \
        if (now != owner) {                                                                                     \
            if (owner >= 0 && grow_append(&ends[owner], point) < 0) failed = 1;                                 \
            if (now >= 0 && grow_append(&starts[now], point) < 0) failed = 1;                                   \
            owner = now;                                                                                        \
        }                                                                                                       \
    } while (0)
    while (!failed) {
        /* the set whose next bound is the lowest, and the lowest next bound of the others */
        Py_ssize_t first = -1;
        int64_t after = INT64_MAX;
        int others = 0;
        for (Py_ssize_t k = 0; k < set_count; k++) {
            if (next[k] == 2 * lengths[k]) continue;
            int64_t value = BOUND(k, next[k]);
            if (first < 0 || value < BOUND(first, next[first])) {
                if (first >= 0) {
                    after = BOUND(first, next[first]);
                    others = 1;
                }
                first = k;
            } else if (!others || value < after) {
                after = value;
                others = 1;
            }
        }
        if (first < 0) break;
        /* that set's bounds below every other set's next one: only it changes there (most bounds) */
        Py_ssize_t at = next[first], last = 2 * lengths[first];
        while (at < last && (!others || BOUND(first, at) < after)) {
            int64_t point = BOUND(first, at);
            covered ^= 1u << first; /* its bounds alternate: a start (covered from here), an end (not) */
            at++;
            if (at < last && BOUND(first, at) == point) { /* an end and the start touching it: still covered */
                covered ^= 1u << first;
                at++;
            }
            NEW_OWNER(point);
            if (failed) break;
        }
        next[first] = at;
        if (!others || failed) continue;
        /* then the next point: every set with a bound there, the owner once they are all passed */
        int64_t point = INT64_MAX;
        int any = 0;
        for (Py_ssize_t k = 0; k < set_count; k++)
            if (next[k] < 2 * lengths[k] && (!any || BOUND(k, next[k]) < point)) {
                point = BOUND(k, next[k]);
                any = 1;
            }
        for (Py_ssize_t k = 0; k < set_count; k++)
            while (next[k] < 2 * lengths[k] && BOUND(k, next[k]) == point) {
                covered ^= 1u << k;
                next[k]++;
            }
        NEW_OWNER(point);
    }
#undef NEW_OWNER
#undef BOUND
    Py_END_ALLOW_THREADS;
    if (failed)
        PyErr_NoMemory();
    else
        result = interval_sets(starts, ends, set_count);
done:
    for (int i = 0; i < 2 * MAX_PAINTED_SETS; i++)
        if (columns[i].held) PyBuffer_Release(&columns[i].view);
    free_growing(starts, MAX_PAINTED_SETS);
    free_growing(ends, MAX_PAINTED_SETS);
    Py_DECREF(sets);
    return result;
}

static PyMethodDef METHODS[] = {
    {"merge_flagged", merge_flagged, METH_VARARGS,
     "merge_flagged(ts, dur, flags, set_count) -> [(starts, ends) int64 bytearrays] per set, or None when a set's "
     "starts are not sorted"},
    {"paint_normalised", paint_normalised, METH_VARARGS,
     "paint_normalised([(starts, ends), ...]) -> [(starts, ends) int64 bytearrays] per layer and the rest, or None "
     "when a set is not normalised"},
    {"merge_aliases", merge_aliases, METH_VARARGS,
     "merge_aliases(parent, is_cpu_op, names) -> alias int64 bytearray, or None when a parent comes after its child"},
    {"merge_levels", merge_levels, METH_VARARGS,
     "merge_levels(thresholds, state, lane_first, name, start, end, first_cut, last, wanted, out_cuts, out_names) -> "
     "the items each level closed"},
    {"tree_down", tree_down, METH_VARARGS,
     "tree_down(parent, is_row, host_total, root) -> (row_owner int64 bytearray, children_time int64 bytearray) "
     "or None"},
    {"tree_up", tree_up, METH_VARARGS,
     "tree_up(parent, is_cpu_op, device_total, tc_total, tc_eligible) -> bool: totals summed up in place"},
    {"nest_in_row_order", nest_in_row_order, METH_VARARGS,
     "nest_in_row_order(ts, dur, track, host_rows, runtime_rows, root, unlinked) -> (found int64 bytes, dropped) "
     "or None"},
    {"lane_depths", lane_depths, METH_VARARGS,
     "lane_depths(start, end) -> depth int32 bytearray, or None when the starts are not sorted"},
    {"sweep", sweep, METH_VARARGS,
     "sweep(order, starts, ends, tracks, node_count, root, unlinked) -> (found int64 bytes, dropped)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_call_tree_sweep", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__call_tree_sweep(void) { return PyModule_Create(&MODULE); }
