/* rules.c: the optimizer's table of rules, one entry per rule of rule_list.h, each taken from
 * the rule's own file (lwi_rule_<name>). */
#include "optim/rules.h"

#define RULE_ENTRY(KIND, name, whole, parts) [LW_OPTIMIZER_##KIND] = &lwi_rule_##name,
static const lwi_rule *const rules[] = {LWI_RULES(RULE_ENTRY)};
#undef RULE_ENTRY

const lwi_rule *lwi_rule_of(lw_optimizer_kind kind) {
    const int32_t n = (int32_t)(sizeof rules / sizeof rules[0]);
    return (int32_t)kind >= 0 && (int32_t)kind < n ? rules[kind] : NULL;
}
