-- recipe_nanochat_spec.lua: --arch nanochat's optimizer groups (app/recipe_nanochat.lua) as
-- nanochat's setup_optimizer makes them, routed over the model, with the learning-rate flags'
-- meaning; and the model's initialisation plan (its registry entry's init).
local lw = require("lwopt")
local recipe = require("lwopt.app.recipe")
local recipe_nanochat = require("lwopt.app.recipe_nanochat")

local function routed(v, n_embd)
   local specs = lw.models.specs("nanochat", { n_layer = 2, n_embd = n_embd, n_head = 4,
      vocab = 64 })
   local out = {}
   for _, s in ipairs(recipe.with_group_lrs(lw.route(specs, recipe_nanochat.rules(v, n_embd),
      { warn = false }), v)) do out[s.name] = s end
   return out
end

describe("--arch nanochat's optimizer groups", function()
   it("are nanochat's: AdamW's rates scaled by (n_embd / 768)^-0.5 but the scalars', Muon for "
      .. "the matrices", function()
      local v = { from_preset = { lr = true, adamw_lr = true } }
      recipe_nanochat.flag_defaults(v)
      assert.same({ 0.02, 0.004, 0.2, 0.5 }, { v.lr, v.adamw_lr, v.embedding_lr, v.scalar_lr })
      local r = routed(v, 192) -- (192 / 768)^-0.5 = 2
      local function group(name)
         local s = r[name]
         local a = s.opts and s.opts.adamw or {}
         return { s.optimizer, s.opts and s.opts.lr, s.opts and s.opts.weight_decay, a.beta1,
            a.beta2, a.eps }
      end
      assert.same({ "adamw", 0.008, 0.01, 0.8, 0.96, 1e-10 }, group("lm_head.weight"))
      assert.same({ "adamw", 0.4, 0.001, 0.8, 0.995, 1e-10 }, group("wte.weight"))
      assert.same({ "adamw", 0.2, 0.01, 0.8, 0.995, 1e-10 }, group("h.1.attn.ve.weight"))
      assert.same({ "adamw", 0.005, 0.05, 0.8, 0.95, 1e-10 }, group("resid_lambdas"))
      assert.same({ "adamw", 0.5, 0, 0.96, 0.95, 1e-10 }, group("x0_lambdas"))
      for _, name in ipairs({ "h.0.attn.qkv.weight", "h.1.attn.ve_gate.weight",
         "h.1.mlp.proj.weight" }) do
         assert.equal("muon", r[name].optimizer, name)
         assert.is_nil(r[name].opts, name) -- --lr and the Muon flags
      end
   end)

   it("keep a mixture of experts' router off Muon, as the default rules do", function()
      local v = { from_preset = {} }
      recipe_nanochat.flag_defaults(v)
      local specs = lw.models.specs("nanochat", { n_layer = 1, n_embd = 32, n_head = 2,
         vocab = 64, n_expert = 2 })
      local r = {}
      for _, s in ipairs(lw.route(specs, recipe_nanochat.rules(v, 32), { warn = false })) do
         r[s.name] = s.optimizer
      end
      assert.equal("adamw", r["h.0.moe.router.weight"])
      assert.equal("muon", r["h.0.moe.experts.1.fc.weight"])
   end)

   it("take the learning-rate flags given: --adamw-lr the head's, --embedding-lr the "
      .. "embeddings', --scalar-lr the scalars'", function()
      local v = { lr = 0.05, adamw_lr = 0.001, embedding_lr = 0.3, scalar_lr = 0.1,
         from_preset = {} }
      recipe_nanochat.flag_defaults(v)
      assert.same({ 0.05, 0.001, 0.3, 0.1 }, { v.lr, v.adamw_lr, v.embedding_lr, v.scalar_lr })
      local r = routed(v, 768)
      assert.near(0.001, r["lm_head.weight"].opts.lr, 1e-12)
      assert.near(0.3, r["wte.weight"].opts.lr, 1e-12)
      assert.near(0.15, r["h.1.attn.ve.weight"].opts.lr, 1e-12)
      assert.near(0.001, r["resid_lambdas"].opts.lr, 1e-12)
      assert.near(0.1, r["x0_lambdas"].opts.lr, 1e-12)
   end)

   it("initialise as nanochat's init_weights", function()
      local init = lw.models.get("nanochat").init
      local c = lw.models.config("nanochat", { n_layer = 3, n_embd = 48, n_head = 4 })
      local s = math.sqrt(3 / 48)
      local function of(name) return init({ name = name }, c) end
      assert.same({ normal = 0.8 }, of("wte.weight"))
      assert.same({ normal = 0.001 }, of("lm_head.weight"))
      assert.same({ uniform = { -s, s } }, of("h.0.attn.qkv.weight"))
      assert.same({ uniform = { -s, s } }, of("h.2.attn.ve.weight"))
      assert.same({ uniform = { 0, 0.02 } }, of("h.2.attn.ve_gate.weight"))
      assert.same({ uniform = { -0.4 * s, 0.4 * s } }, of("h.1.mlp.fc.weight"))
      assert.same({ zeros = true }, of("h.1.mlp.proj.weight"))
      assert.same({ zeros = true }, of("h.1.attn.proj.weight"))
      local r, x = of("resid_lambdas").values, of("x0_lambdas").values
      for i, want in ipairs({ 1.15, 1.10, 1.05 }) do assert.near(want, r[i], 1e-12) end
      for i, want in ipairs({ 0.20, 0.125, 0.05 }) do assert.near(want, x[i], 1e-12) end
   end)
end)
