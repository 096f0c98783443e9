/* rules.c: what every optimizer rule is, from rule_list.h: whether it updates whole matrices,
 * its state's parts (its name is names.c's). The layout asks whether a rule is whole-matrix;
 * the optimizer and checkpoints ask for the parts. What a rule does is the optimizer's
 * (optim/rules.c). */
#include "base/base.h"
#include "base/rule_list.h"

typedef struct rule_info {
    bool whole;
    const char *parts[LWI_RULE_MAX_PARTS];
} rule_info;

#define UNPAREN(...) __VA_ARGS__
#define RULE_INFO(KIND, name, whole, parts) [LW_OPTIMIZER_##KIND] = {whole, UNPAREN parts},
static const rule_info rules[] = {LWI_RULES(RULE_INFO)};
#undef RULE_INFO
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
    while (r != NULL && n < LWI_RULE_MAX_PARTS && r->parts[n] != NULL) n++;
    return n;
}

const char *lw_optimizer_kind_part(lw_optimizer_kind kind, int32_t part) {
    return part >= 0 && part < lw_optimizer_kind_parts(kind) ? rules[kind].parts[part] : NULL;
}
