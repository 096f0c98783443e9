/* rules.c: what every optimizer rule is, from rule_list.h: whether it updates whole matrices,
 * its state's parts (its name is names.c's). The layout asks whether a rule is whole-matrix;
 * the optimizer and checkpoints ask for the parts. What a rule does is the optimizer's
 * (optim/rules.c). */
#include "base/base.h"
#include "base/rule_list.h"

typedef struct part_info {
    const char *name;
    lw_part_size size;
} part_info;

typedef struct rule_info {
    bool whole;
    part_info parts[LWI_RULE_MAX_PARTS];
} rule_info;

#define UNPAREN(...) __VA_ARGS__
#define P(name) {name, LW_PART_ELEMENTS}
#define L(name) {name, LW_PART_LINES}
#define RULE_INFO(KIND, name, whole, parts) [LW_OPTIMIZER_##KIND] = {whole, UNPAREN parts},
static const rule_info rules[] = {LWI_RULES(RULE_INFO)};
#undef RULE_INFO
#undef P
#undef L
enum { N_RULES = sizeof rules / sizeof rules[0] };

/* as many rules as values up to the last one listed: no value left out, none listed twice */
_Static_assert(N_RULES == LWI_N_RULES, "rule_list.h and lw_optimizer_kind differ");

static const rule_info *rule_of(lw_optimizer_kind kind) {
    return (int32_t)kind >= 0 && (int32_t)kind < N_RULES ? &rules[kind] : NULL;
}

int32_t lw_optimizer_kind_count(void) { return N_RULES; }

bool lw_optimizer_kind_whole(lw_optimizer_kind kind) {
    const rule_info *r = rule_of(kind);
    return r != NULL && r->whole;
}

int32_t lw_optimizer_kind_parts(lw_optimizer_kind kind) {
    const rule_info *r = rule_of(kind);
    int32_t n = 0;
    while (r != NULL && n < LWI_RULE_MAX_PARTS && r->parts[n].name != NULL) n++;
    return n;
}

const char *lw_optimizer_kind_part(lw_optimizer_kind kind, int32_t part) {
    return part >= 0 && part < lw_optimizer_kind_parts(kind) ? rules[kind].parts[part].name : NULL;
}

lw_part_size lw_optimizer_kind_part_size(lw_optimizer_kind kind, int32_t part) {
    return part >= 0 && part < lw_optimizer_kind_parts(kind) ? rules[kind].parts[part].size
                                                              : LW_PART_ELEMENTS;
}

lw_status lw_optimizer_kind_part_count(lw_optimizer_kind kind, int32_t part, int64_t elements,
                                       int64_t rows, int64_t cols, int64_t *count) {
    if (count == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: count pointer is NULL");
    *count = 0;
    if (part < 0 || part >= lw_optimizer_kind_parts(kind))
        return lwi_fail(LW_ERR_RANGE, "optimizer: %s has no state part %d",
                        lw_optimizer_kind_name(kind) ? lw_optimizer_kind_name(kind) : "no rule",
                        part);
    if (elements < 0 || rows < 0 || cols < 0)
        return lwi_fail(LW_ERR_INVALID, "optimizer: negative size (%lld elements, %lld x %lld)",
                        (long long)elements, (long long)rows, (long long)cols);
    *count = rules[kind].parts[part].size == LW_PART_LINES ? (rows >= cols ? rows : cols)
                                                           : elements;
    return LW_OK;
}
