/* sharded.c: the group blocks of lw_buffers. Outside a bucket group's moments of use a rank
 * keeps only its shard of the group's gradients (ZeRO-2) and parameters (ZeRO-3), and bf16
 * parameters only as bf16. Whole groups live in blocks from a per-buffer pool: a group's
 * parameters as the model reads them (fp32: gathered at ZeRO-3, widened from bf16), or a group's
 * gradient from the first write in backward until its reduce-scatter has been added into the
 * shard. The blocks held stay within a budget of the two largest groups (parameters, gradients
 * and the reduce-scatter's shard): to make room (make_room), spare blocks are freed, idle
 * gathered groups the pass needs only later evicted, reductions in flight finished, idle groups
 * the pass is inside evicted, and last an idle group's partial gradient reduced early (sums are
 * linear, so reducing in parts gives the same shard). Every decision depends only on the
 * sequence of calls, never on timing, so all ranks issue the same collectives in the same order.
 * A ZeRO-3 block of bf16 parameters holds the fp32 view and, after it, the gathered bf16 group
 * (the wire): a gather lands beside the view it widens into, and every block of a buffer has
 * one size, so parameter and gradient blocks share the pool. bf16 views are widened a parameter
 * at a time, when lw_buffers_param first asks for one: the model kernels that take a weight's
 * dtype read the bf16 as stored, and those parameters are never widened. */
#include "buffers/buffers_state.h"

#include <stdlib.h>
#include <string.h>

/* Bytes a block's data holds: the fp32 group, and after it a bf16 group (the wire: what the
 * all-gather of bf16 parameters at ZeRO-3, or the reduce-scatter of bf16 gradients moves). */
static int64_t block_data_bytes(const lw_buffers *bs, const lwi_buf *b) {
    const bool wire = (bs->residency->sharded_params && bs->param_size != (int64_t)sizeof(float)) ||
                      (bs->residency->sharded_grads && bs->grad_dtype != LW_DTYPE_F32);
    return ((int64_t)sizeof(float) + (wire ? 2 : 0)) * b->block_numel;
}

/* A block's bytes as the budget counts them: its data and the reduce-scatter's shard (the
 * request's scratch on backends that cannot reduce in place). */
static int64_t block_bytes(const lw_buffers *bs, const lwi_buf *b) {
    return block_data_bytes(bs, b) + (int64_t)sizeof(float) * b->block_shard;
}


/* What a group's gradient is summed in: the block itself for fp32, the bf16 after it. */
static void *grad_wire_of(const lw_buffers *bs, const lwi_buf *b, float *data) {
    return bs->grad_dtype == LW_DTYPE_F32 ? (void *)data : (void *)(data + b->block_numel);
}

static int64_t held_blocks(const lw_buffers *bs) {
    return bs->param_block_bytes + bs->grad_block_bytes + bs->cached_bytes;
}


static void free_block(lw_buffers *bs, lwi_block *k) {
    lw_request_free(k->req);
    lw_device_free(bs->device, k->data);
    k->data = NULL;
    k->req = NULL;
}

lw_status lwi_sharded_init(lw_buffers *bs) {
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        lwi_buf *b = &bs->buffers[bs->groups[gi].buffer];
        if (bs->groups[gi].count > b->block_numel) b->block_numel = bs->groups[gi].count;
        /* the largest shard any rank gets of any group (equal shards: the largest group's;
         * packed: a rank may own all of a smaller group). The same on every rank: the budget
         * it sets decides evictions, and so the order of collectives. */
        const lwi_group *g = &bs->groups[gi];
        for (int32_t r = 0; r < (g->counts ? b->dp : 1); r++) {
            const int64_t shard = g->counts ? g->counts[r] : g->shard_count;
            if (shard > b->block_shard) b->block_shard = shard;
        }
    }
    for (int32_t b = 0; b < bs->n_buffers; b++)
        if (block_bytes(bs, &bs->buffers[b]) > bs->largest_block)
            bs->largest_block = block_bytes(bs, &bs->buffers[b]);
    /* two groups: each with its gradient, and at ZeRO-3 its gathered parameters too */
    bs->budget = 2 * (int64_t)bs->residency->blocks * bs->largest_block;
    bs->pass = LW_PASS_FORWARD;
    bs->cursor = -1;
    return LW_OK;
}

void lwi_sharded_free(lw_buffers *bs) {
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        free_block(bs, &bs->groups[gi].gblock);
        free_block(bs, &bs->groups[gi].pblock);
    }
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        lwi_buf *buf = &bs->buffers[b];
        for (int32_t k = 0; k < buf->n_spare; k++)
            free_block(bs, &buf->spare[k]);
        free(buf->spare);
    }
}

/* A block no longer in use goes to its buffer's spares. */
static lw_status give_back(lw_buffers *bs, lwi_block *k, int32_t buffer, bool param) {
    lwi_buf *b = &bs->buffers[buffer];
    if (b->n_spare == b->cap_spare) {
        int32_t cap = b->cap_spare ? 2 * b->cap_spare : 4;
        lwi_block *grown = realloc(b->spare, sizeof(lwi_block) * (size_t)cap);
        if (grown == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
        b->spare = grown;
        b->cap_spare = cap;
    }
    b->spare[b->n_spare++] = *k;
    k->data = NULL;
    k->req = NULL;
    const int64_t bytes = block_bytes(bs, b);
    if (param)
        bs->param_block_bytes -= bytes;
    else
        bs->grad_block_bytes -= bytes;
    bs->cached_bytes += bytes;
    return LW_OK;
}

/* Waits for group gi's reduce-scatter and adds this rank's reduced shard into its gradient
 * shard; the block goes back to the pool. */
static lw_status complete_reduce(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    lwi_buf *b = &bs->buffers[g->buffer];
    lw_status st = lw_request_wait(g->gblock.req);
    if (st != LW_OK) return st;
    float *into = b->grad + g->shard_base, *sum = lwi_shard_in_block(g, g->gblock.data);
    if (bs->grad_dtype != LW_DTYPE_F32) /* the bf16 sum widened, then added in fp32 */
        st = lw_vec_from_bf16(bs->stream, sum,
                              (const uint16_t *)grad_wire_of(bs, b, g->gblock.data) +
                                  (g->shard_start - g->start),
                              g->shard_count);
    if (st == LW_OK) st = lw_vec_add(bs->stream, into, into, sum, g->shard_count);
    g->reducing = false;
    if (st != LW_OK) return st;
    return give_back(bs, &g->gblock, g->buffer, false);
}

/* Starts the reduce-scatter of what group gi's gradient block holds (pre-scaled by 1/dp). */
static lw_status start_reduce(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    if (g->gblock.data == NULL || g->reducing) return LW_OK;
    lwi_buf *b = &bs->buffers[g->buffer];
    lw_status st = b->dp > 1 ? lw_vec_scale(bs->stream, g->gblock.data, g->count,
                                            1.0f / (float)b->dp)
                             : LW_OK;
    void *sum = grad_wire_of(bs, b, g->gblock.data);
    if (st == LW_OK && sum != g->gblock.data) /* bf16: the averaged gradient rounded once */
        st = lw_vec_to_bf16(bs->stream, sum, g->gblock.data, g->count);
    if (st != LW_OK) return st;
    g->reducing = true;
    lw_request_set_label(g->gblock.req, g->label); /* pooled blocks serve any group */
    if (g->counts != NULL)
        return lw_comm_reduce_scatterv(b->comm, sum, g->counts, bs->grad_dtype, g->gblock.req);
    return lw_comm_reduce_scatter(b->comm, sum, g->count, bs->grad_dtype, g->gblock.req);
}

lw_status lwi_sharded_start_grad(lw_buffers *bs, int32_t gi) { return start_reduce(bs, gi); }

lw_status lwi_sharded_finish_grads(lw_buffers *bs) {
    lw_status first = LW_OK;
    for (int32_t gi = bs->n_groups - 1; gi >= 0; gi--) {
        lw_status st = LW_OK;
        if (bs->groups[gi].gblock.data != NULL && !bs->groups[gi].reducing)
            st = start_reduce(bs, gi); /* a partial gradient nobody reported complete */
        if (st == LW_OK && bs->groups[gi].reducing) st = complete_reduce(bs, gi);
        if (first == LW_OK) first = st;
    }
    return first;
}

lw_status lwi_sharded_wait_gather(lwi_group *g) {
    if (!g->gathering) return LW_OK;
    g->gathering = false;
    return lw_request_wait(g->pblock.req);
}

/* Group gi's block was just filled (or is about to be): none of its parameters' fp32 views is
 * current yet (its parameters lie between its first and last definition index). */
static void views_stale(lw_buffers *bs, int32_t gi) {
    for (int32_t p = bs->groups[gi].first; p <= bs->groups[gi].last; p++)
        if (bs->params[p].group == gi) bs->params[p].widened = false;
}

static lw_status evict_params(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    lw_status st = lwi_sharded_wait_gather(g);
    if (st != LW_OK) return st;
    return give_back(bs, &g->pblock, g->buffer, true);
}

/* The least recently used group matching `want`, other than keep; -1 if none. */
typedef bool (*group_filter)(const lwi_group *g);
static int32_t least_recent(const lw_buffers *bs, group_filter want, int32_t keep) {
    int32_t best = -1;
    for (int32_t gi = 0; gi < bs->n_groups; gi++)
        if (gi != keep && want(&bs->groups[gi]) &&
            (best < 0 || bs->groups[gi].used < bs->groups[best].used))
            best = gi;
    return best;
}

static bool idle_params(const lwi_group *g) { return g->pblock.data != NULL && g->pins == 0; }

/* How far ahead of the pass a group's next use lies: 0 when the pass is inside it (a group of
 * small parameters spread over the model, like the norms), INT32_MAX when it is behind. */
static int32_t distance(const lw_buffers *bs, const lwi_group *g) {
    const bool fwd = bs->pass == LW_PASS_FORWARD;
    if (fwd ? g->last < bs->cursor : g->first > bs->cursor) return INT32_MAX;
    if (g->first <= bs->cursor && bs->cursor <= g->last) return 0;
    return fwd ? g->first - bs->cursor : bs->cursor - g->last;
}

/* The idle gathered group to evict: the one needed latest, least recently used among equals. */
static int32_t eviction_victim(const lw_buffers *bs, int32_t keep) {
    int32_t best = -1;
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        const lwi_group *g = &bs->groups[gi];
        if (gi == keep || !idle_params(g)) continue;
        if (best < 0) {
            best = gi;
            continue;
        }
        const int32_t d = distance(bs, g), db = distance(bs, &bs->groups[best]);
        if (d > db || (d == db && g->used < bs->groups[best].used)) best = gi;
    }
    return best;
}
static bool idle_grad(const lwi_group *g) {
    return g->gblock.data != NULL && !g->reducing && g->pins == 0;
}

/* One step towards room for a block: *freed says whether anything changed. In order: free a
 * spare block; evict an idle gathered group the pass needs only later; finish a reduction in
 * flight; evict an idle group the pass is inside (it will be gathered again); reduce an idle
 * group's partial gradient early. A prefetch only frees spare blocks: evicting for a group that
 * is merely needed next would trade a gather now for one later, and waiting would undo the
 * overlap it is for. */
static lw_status make_room(lw_buffers *bs, int32_t keep, bool prefetch, bool *freed) {
    *freed = true;
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        lwi_buf *buf = &bs->buffers[b];
        if (buf->n_spare > 0) {
            free_block(bs, &buf->spare[--buf->n_spare]);
            bs->cached_bytes -= block_bytes(bs, buf);
            return LW_OK;
        }
    }
    if (prefetch) {
        *freed = false;
        return LW_OK;
    }
    int32_t gi = eviction_victim(bs, keep);
    if (gi >= 0 && distance(bs, &bs->groups[gi]) > 0) return evict_params(bs, gi);
    for (int32_t k = bs->n_groups - 1; k >= 0; k--) /* the reduction started first */
        if (bs->groups[k].reducing) return complete_reduce(bs, k);
    if (gi >= 0) return evict_params(bs, gi);
    gi = least_recent(bs, idle_grad, keep);
    if (gi >= 0) {
        bs->flushes++;
        lw_status st = start_reduce(bs, gi);
        return st != LW_OK ? st : complete_reduce(bs, gi);
    }
    *freed = false;
    return LW_OK;
}

/* A block for group gi: a spare one, or a new one within the budget (making room first).
 * Beyond the budget a prefetch gets none (data NULL); anything else is counted over budget. */
static lw_status take_block(lw_buffers *bs, int32_t gi, lwi_block *out, bool param, bool prefetch) {
    lwi_buf *b = &bs->buffers[bs->groups[gi].buffer];
    const int64_t bytes = block_bytes(bs, b);
    out->data = NULL;
    while (b->n_spare == 0 && held_blocks(bs) + bytes > bs->budget) {
        bool freed;
        lw_status st = make_room(bs, gi, prefetch, &freed);
        if (st != LW_OK) return st;
        if (!freed) break;
    }
    if (b->n_spare > 0) {
        *out = b->spare[--b->n_spare];
        bs->cached_bytes -= bytes;
    } else {
        if (held_blocks(bs) + bytes > bs->budget) {
            if (prefetch) return LW_OK;
            bs->over_budget++;
        }
        void *data = NULL;
        if (lw_device_alloc(bs->device, block_data_bytes(bs, b), &data) != LW_OK)
            return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory for a group block of %lld "
                            "elements on %s", (long long)b->block_numel,
                            lw_device_name(bs->device));
        out->data = data;
        lw_status st = lw_request_new(&out->req);
        if (st == LW_OK) st = lw_request_set_stream(out->req, bs->stream);
        if (st != LW_OK) {
            lw_device_free(bs->device, out->data);
            out->data = NULL;
            return st;
        }
    }
    if (param)
        bs->param_block_bytes += bytes;
    else
        bs->grad_block_bytes += bytes;
    const int64_t total = bs->array_bytes + held_blocks(bs);
    if (total > bs->peak) bs->peak = total;
    return LW_OK;
}

/* Starts gathering group gi's parameters: this rank's shard into place, then an in-place
 * all-gather in the param dtype (bf16: into the block's wire, each view widened from it when
 * first asked for). A prefetch may find no room and start nothing. */
static lw_status start_gather(lw_buffers *bs, int32_t gi, bool prefetch) {
    lwi_group *g = &bs->groups[gi];
    lwi_buf *b = &bs->buffers[g->buffer];
    lw_status st = take_block(bs, gi, &g->pblock, true, prefetch);
    if (st != LW_OK || g->pblock.data == NULL) return st;
    views_stale(bs, gi);
    void *wire = lwi_wire_of(bs, b, g->pblock.data);
    st = lw_device_copy(bs->stream, lwi_param_at(bs, wire, g->shard_start - g->start),
                        lwi_param_at(bs, b->param, g->shard_base), bs->param_size * g->shard_count,
                        LW_COPY_DEVICE_TO_DEVICE);
    if (st != LW_OK) return st;
    g->gathering = true;
    g->used = ++bs->tick;
    bs->gathers++;
    lw_request_set_label(g->pblock.req, g->label);
    const lw_dtype dtype = bs->residency->param_dtype;
    if (g->counts != NULL)
        return lw_comm_allgather_segments(b->comm, wire, g->counts, dtype, g->pblock.req);
    return lw_comm_allgather(b->comm, wire, g->count, dtype, g->pblock.req);
}

lw_status lwi_sharded_take_views(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    lw_status st = take_block(bs, gi, &g->pblock, true, false);
    if (st != LW_OK) return st;
    views_stale(bs, gi);
    g->used = ++bs->tick;
    return LW_OK;
}

lw_status lwi_sharded_prefetch(lw_buffers *bs, int32_t gi) {
    if (gi < 0 || gi >= bs->n_groups || bs->groups[gi].pblock.data != NULL)
        return LW_OK;
    return start_gather(bs, gi, true);
}

lw_status lwi_sharded_wait_gathers(lw_buffers *bs) {
    lw_status first = LW_OK;
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        lw_status st = lwi_sharded_wait_gather(&bs->groups[gi]);
        if (first == LW_OK) first = st;
    }
    return first;
}

lw_status lwi_sharded_drop_params(lw_buffers *bs) {
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        lwi_group *g = &bs->groups[gi];
        if (g->pins > 0)
            return lwi_fail(LW_ERR_STATE,
                            "buffers: group %d is still acquired (%d acquire(s) "
                            "without release) when its parameters change",
                            gi, g->pins);
        lw_status st = g->pblock.data ? evict_params(bs, gi) : LW_OK;
        if (st != LW_OK) return st;
    }
    bs->pass = LW_PASS_FORWARD;
    bs->cursor = -1;
    return LW_OK;
}

/* The pass moved to definition index cursor: gathered groups it has left behind, unless in
 * use, will not be read again in this pass (a tied weight read again is acquired as a reuse). */
static lw_status drop_behind(lw_buffers *bs) {
    for (int32_t gi = 0; gi < bs->n_groups; gi++) {
        lwi_group *g = &bs->groups[gi];
        if (!idle_params(g)) continue;
        bool behind = bs->pass == LW_PASS_FORWARD ? g->last < bs->cursor : g->first > bs->cursor;
        if (behind) {
            lw_status st = evict_params(bs, gi);
            if (st != LW_OK) return st;
        }
    }
    return LW_OK;
}

/* The group the pass will need next after gi that is not held: forward in group order,
 * backward by last parameter; groups the pass has moved past do not count. -1: none. */
static int32_t next_in_pass(const lw_buffers *bs, int32_t gi, lw_pass pass) {
    bool after = false;
    for (int32_t k = 0; k < bs->n_groups; k++) {
        const int32_t h = pass == LW_PASS_FORWARD ? k : bs->backward[k];
        const lwi_group *g = &bs->groups[h];
        if (h == gi) {
            after = true;
            continue;
        }
        bool ahead = pass == LW_PASS_FORWARD ? g->last > bs->cursor : g->first < bs->cursor;
        if (after && ahead && g->pblock.data == NULL) return h;
    }
    return -1;
}

void lwi_sharded_pin(lw_buffers *bs, int32_t gi) {
    bs->groups[gi].pins++;
    bs->groups[gi].used = ++bs->tick;
}

lw_status lwi_sharded_hold_grad(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    lw_status st = LW_OK;
    if (g->gblock.data != NULL && g->reducing) st = complete_reduce(bs, gi);
    if (st == LW_OK && g->gblock.data == NULL) {
        st = take_block(bs, gi, &g->gblock, false, false);
        if (st == LW_OK)
            st = lw_device_set(bs->stream, g->gblock.data, 0, (int64_t)sizeof(float) * g->count);
    }
    return st;
}

lw_status lwi_sharded_acquire_view(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse) {
    const int32_t gi = bs->params[param].group;
    lwi_group *g = &bs->groups[gi];
    const lwi_residency *r = bs->residency;
    /* below ZeRO-3 the arrays hold the parameters once the group's sync is done */
    lw_status st = r->sharded_params ? LW_OK : lwi_whole_finish_params(bs, gi);
    if (st == LW_OK && !reuse) {
        if (pass != bs->pass) {
            bs->pass = pass;
            bs->cursor = pass == LW_PASS_FORWARD ? -1 : bs->n_params;
        }
        if (pass == LW_PASS_FORWARD ? param > bs->cursor : param < bs->cursor) {
            bs->cursor = param;
            st = drop_behind(bs);
        }
    }
    /* below ZeRO-3 the bf16 arrays are read as stored, or through views whose block is taken on
     * the first request (lwi_views_param): a group read only as stored takes none */
    if (st == LW_OK && g->pblock.data == NULL && r->sharded_params)
        st = start_gather(bs, gi, false);
    if (st == LW_OK) st = lwi_sharded_wait_gather(g);
    if (st != LW_OK) return st;
    lwi_sharded_pin(bs, gi);
    if (pass == LW_PASS_BACKWARD && r->sharded_grads) st = lwi_sharded_hold_grad(bs, gi);
    if (st == LW_OK && r->sharded_params && bs->o.overlap_param && !reuse)
        st = lwi_sharded_prefetch(bs, next_in_pass(bs, gi, pass));
    if (st != LW_OK) g->pins--;
    return st;
}

lw_status lwi_sharded_start_whole_params(lw_buffers *bs) {
    lw_status st = lwi_sharded_drop_params(bs);
    return st != LW_OK ? st : lwi_whole_start_params(bs);
}
