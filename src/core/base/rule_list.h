/* rule_list.h: every optimizer rule, once, in the order of lw_optimizer_kind (lw_layout.h).
 * From this list come the kinds' names, whether each updates whole matrices, its state parts
 * (rules.c), and the optimizer's table of rules (optim/rules.c), which takes each rule's
 * behaviour from `lwi_rule_<name>`, defined in the rule's own file: a rule listed here and not
 * written fails to link, naming it. Not public API.
 *
 * R(KIND, name, whole, parts): KIND the enum's suffix (LW_OPTIMIZER_<KIND>), name its word,
 * whole true when it updates whole matrices, parts its state's parts in a brace list, each a
 * name and its size class (lw_part_size): P(name) as many floats as the elements a rank
 * updates, L(name) one float per line of the matrix (per row when rows >= cols, else per
 * column; a whole-matrix rule's). */
#ifndef LW_BASE_RULE_LIST_H
#define LW_BASE_RULE_LIST_H

#define LWI_RULES(R)                                                                               \
    R(ADAMW, adamw, false, ({P("m"), P("v")}))                                                     \
    R(MUON, muon, true, ({P("m")}))                                                                \
    R(LION, lion, false, ({P("m")}))                                                               \
    R(NORMUON, normuon, true, ({P("m"), L("v")}))

/* The most parts a rule's state has (lw_state_entry.parts), and how many rules there are. */
#define LWI_RULE_MAX_PARTS 4
#define LWI_RULE_COUNT(KIND, name, whole, parts) +1
#define LWI_N_RULES (0 LWI_RULES(LWI_RULE_COUNT))

#endif
