/* test_options.c: the versioned option structs of lw.h: each defaults function sets the size,
 * and each call that takes the struct refuses a size of 0 (a struct not from its defaults), a
 * larger one (a newer lw.h) and one no lw.h had, naming the struct; NULL still means defaults;
 * a nested struct (lw_optimizer_options's muon and adamw) keeps the size its outer holds. */
#include "layout_util.h"

/* A struct with room past its end, as a newer lw.h's larger struct would be. */
#define GROWN(type)                                                                                \
    struct {                                                                                       \
        type o;                                                                                    \
        char newer[16];                                                                            \
    }

static void test_defaults_set_size(void) {
    CHECK_EQ(lw_layout_defaults().size, sizeof(lw_layout_options));
    CHECK_EQ(lw_runtime_defaults().size, sizeof(lw_runtime_options));
    CHECK_EQ(lw_muon_defaults().size, sizeof(lw_muon_options));
    CHECK_EQ(lw_adamw_defaults().size, sizeof(lw_adamw_options));
    CHECK_EQ(lw_lion_defaults().size, sizeof(lw_lion_options));
    CHECK_EQ(lw_buffers_defaults().size, sizeof(lw_buffers_options));
    const lw_optimizer_options oo = lw_optimizer_defaults();
    CHECK_EQ(oo.size, sizeof(lw_optimizer_options));
    CHECK_EQ(oo.muon.size, sizeof(lw_muon_options));
    CHECK_EQ(oo.adamw.size, sizeof(lw_adamw_options));
    /* lw_muon_options' last three booleans sit in what was its tail padding: its size (and so
       lw_optimizer_options' layout) is the one before them, so an older lw.h's struct is read
       whole; a field that grew it would need an `older` entry and the nested layouts moved */
    CHECK_EQ(sizeof(lw_muon_options),
             (offsetof(lw_muon_options, split_qkv) + 1 + _Alignof(lw_muon_options) - 1) /
                 _Alignof(lw_muon_options) * _Alignof(lw_muon_options));
    CHECK(offsetof(lw_muon_options, cautious_wd) < sizeof(lw_muon_options));
}

static void test_layout(const lw_param_spec *s, int n) {
    lw_layout *l = NULL;
    lw_layout_options o;
    memset(&o, 0, sizeof o);
    o.dp = o.expert_dp = 1;
    CHECK_FAILS(lw_layout_new(s, n, &o, &l), LW_ERR_INVALID,
                "layout: lw_layout_options.size is 0: start from lw_layout_defaults()");
    CHECK(l == NULL);
    GROWN(lw_layout_options) g;
    memset(&g, 0, sizeof g);
    g.o = lw_layout_defaults();
    g.o.size = sizeof g;
    CHECK_FAILS(lw_layout_new(s, n, &g.o, &l), LW_ERR_INVALID,
                "layout: lw_layout_options.size is");
    CHECK_FAILS(lw_layout_new(s, n, &g.o, &l), LW_ERR_INVALID, "newer lw.h");
    o = lw_layout_defaults();
    o.size = sizeof o - 4;
    CHECK_FAILS(lw_layout_new(s, n, &o, &l), LW_ERR_INVALID,
                "which no lw.h's lw_layout_options has");
    o = lw_layout_defaults();
    CHECK_OK(lw_layout_new(s, n, &o, &l));
    lw_layout_free(l);
    l = NULL;
    CHECK_OK(lw_layout_new(s, n, NULL, &l)); /* NULL: the defaults */
    lw_layout_free(l);
}

static void test_runtime(void) {
    lw_runtime_options r;
    memset(&r, 0, sizeof r);
    r.zero = 1;
    CHECK_FAILS(lw_runtime_check(&r, NULL), LW_ERR_INVALID,
                "runtime: lw_runtime_options.size is 0: start from lw_runtime_defaults()");
    r = lw_runtime_defaults();
    CHECK_OK(lw_runtime_check(&r, NULL));
    /* the layout options lw_runtime_layout writes into are checked too */
    lw_layout_options lo;
    memset(&lo, 0, sizeof lo);
    CHECK_FAILS(lw_runtime_layout(&r, &lo), LW_ERR_INVALID,
                "runtime: lw_layout_options.size is 0: start from lw_layout_defaults()");
    lo = lw_layout_defaults();
    CHECK_OK(lw_runtime_layout(&r, &lo));
}

static void test_muon_adamw(void) {
    lw_muon *m = NULL;
    lw_muon_options mo;
    memset(&mo, 0, sizeof mo);
    CHECK_FAILS(lw_muon_new(&mo, &m), LW_ERR_INVALID,
                "muon: lw_muon_options.size is 0: start from lw_muon_defaults()");
    CHECK(m == NULL);
    mo = lw_muon_defaults();
    CHECK_OK(lw_muon_new(&mo, &m));
    lw_muon_free(m);

    float w = 1.0f, g = 0.5f, mm = 0.0f, v = 0.0f;
    lw_adamw_options ao;
    memset(&ao, 0, sizeof ao);
    ao.beta1 = 0.9f, ao.beta2 = 0.95f, ao.eps = 1e-8f;
    CHECK_FAILS(lw_adamw_update(NULL, &ao, &w, &g, &mm, &v, 1, 1, 0.1f, 0.0f, 1.0f),
                LW_ERR_INVALID,
                "adamw: lw_adamw_options.size is 0: start from lw_adamw_defaults()");
    CHECK(w == 1.0f && mm == 0.0f); /* refused before any update */
    ao = lw_adamw_defaults();
    CHECK_OK(lw_adamw_update(NULL, &ao, &w, &g, &mm, &v, 1, 1, 0.1f, 0.0f, 1.0f));
    CHECK(w < 1.0f);
}

static void test_lion(void) {
    float w = 1.0f, g = 0.5f, m = 0.0f;
    lw_lion_options o;
    memset(&o, 0, sizeof o);
    o.beta1 = 0.9f, o.beta2 = 0.99f;
    CHECK_FAILS(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "lion: lw_lion_options.size is 0: start from lw_lion_defaults()");
    GROWN(lw_lion_options) grown;
    memset(&grown, 0, sizeof grown);
    grown.o = lw_lion_defaults();
    grown.o.size = sizeof grown;
    CHECK_FAILS(lw_lion_update(NULL, &grown.o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "larger than this library's");
    o = lw_lion_defaults();
    o.size = sizeof(size_t) + 1;
    CHECK_FAILS(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "which no lw.h's lw_lion_options has");
    CHECK(w == 1.0f && m == 0.0f); /* refused before any update */
    o = lw_lion_defaults();
    CHECK_OK(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f));
    CHECK(w < 1.0f);
}

static void test_buffers_optimizer(const lw_param_spec *s, int n) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_self(&c));
    lw_layout *l = make_layout(s, n, 1, INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    if (c == NULL || l == NULL) {
        lw_layout_free(l);
        lw_comm_free(c);
        return;
    }
    lw_buffers *b = NULL;
    lw_buffers_options bo;
    memset(&bo, 0, sizeof bo);
    bo.zero = 1;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &b), LW_ERR_INVALID,
                "buffers: lw_buffers_options.size is 0: start from lw_buffers_defaults()");
    CHECK(b == NULL);
    bo = lw_buffers_defaults();
    CHECK_OK(lw_buffers_new(l, c, NULL, &bo, &b));

    lw_optimizer *opt = NULL;
    lw_optimizer_options oo;
    memset(&oo, 0, sizeof oo);
    oo.muon = lw_muon_defaults();
    oo.adamw = lw_adamw_defaults();
    CHECK_FAILS(lw_optimizer_new(b, &oo, &opt), LW_ERR_INVALID,
                "optimizer: lw_optimizer_options.size is 0: start from lw_optimizer_defaults()");
    oo = lw_optimizer_defaults();
    memset(&oo.muon, 0, sizeof oo.muon); /* the nested struct filled by hand */
    oo.muon.momentum = 0.9f;
    oo.muon.ns_steps = 5;
    CHECK_FAILS(lw_optimizer_new(b, &oo, &opt), LW_ERR_INVALID,
                "optimizer: lw_optimizer_options.muon.size is 0: start from lw_muon_defaults()");
    oo = lw_optimizer_defaults();
    oo.adamw.size = sizeof oo.adamw + 8;
    CHECK_FAILS(lw_optimizer_new(b, &oo, &opt), LW_ERR_INVALID,
                "lw_optimizer_options.adamw.size is");
    CHECK(opt == NULL);
    oo = lw_optimizer_defaults();
    oo.muon = lw_muon_defaults(); /* a whole lw_muon_options of this lw.h is fine */
    oo.muon.momentum = 0.9f;
    CHECK_OK(lw_optimizer_new(b, &oo, &opt));
    lw_optimizer_free(opt);
    lw_buffers_free(b);
    lw_layout_free(l);
    lw_comm_free(c);
}

int main(void) {
    const lw_param_spec specs[] = {mat("w", 8, 8, true), vec("b", 8)};
    test_defaults_set_size();
    test_layout(specs, 2);
    test_runtime();
    test_muon_adamw();
    test_lion();
    test_buffers_optimizer(specs, 2);
    return check_exit("test_options");
}
