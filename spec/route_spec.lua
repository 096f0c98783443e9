-- route_spec.lua: lw.route with the default rules (docs/algorithms.md section 1) and custom lists.
local route = require("lwopt.route")
local arch = require("lwopt.arch")
local models = require("lwopt.models")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

local function by_name(routed)
   local t = {}
   for _, s in ipairs(routed) do t[s.name] = s.optimizer end
   return t
end

describe("lw.route with the default rules", function()
   it("sends GPT matrices to muon and embeddings, norms and biases to adamw", function()
      local r = by_name(route(arch.gpt{ n_layer = 1, n_embd = 64, n_head = 2, bias = true,
         tied = false, vocab = 100, seq_len = 16 }))
      assert.equal("muon", r["h.0.attn.qkv.weight"])
      assert.equal("muon", r["h.0.attn.proj.weight"])
      assert.equal("muon", r["h.0.mlp.fc.weight"])
      assert.equal("muon", r["h.0.mlp.proj.weight"])
      assert.equal("adamw", r["h.0.attn.qkv.bias"])
      assert.equal("adamw", r["h.0.ln_1.weight"])
      assert.equal("adamw", r["wte.weight"])
      assert.equal("adamw", r["wpe.weight"])
      assert.equal("adamw", r["lm_head.weight"])
   end)

   it("sends scalars (role scalar) to adamw whatever their shape", function()
      local r = by_name(route({
         { name = "resid_lambdas", shape = { 12 }, role = "scalar" },
         { name = "gates", shape = { 4, 3 }, role = "scalar" },
         { name = "w", shape = { 4, 3 }, role = "matrix" },
      }))
      assert.same({ resid_lambdas = "adamw", gates = "adamw", w = "muon" }, r)
   end)

   it("keeps a tied embedding on adamw and the MoE router off muon", function()
      local r = by_name(route(models.specs("llama", { n_layer = 1, n_embd = 64, n_head = 2,
         n_expert = 2, expert_hidden = 32, vocab = 100, tied = true })))
      assert.equal("adamw", r["wte.weight"])
      assert.equal("adamw", r["h.0.moe.router.weight"])
      assert.equal("muon", r["h.0.moe.experts.1.proj.weight"])
      assert.equal("muon", r["h.0.moe.experts.1.fc.weight"])
   end)

   it("honours use_muon in both directions and sends 3-D tensors to adamw", function()
      local r = by_name(route({
         { name = "a", shape = { 4, 4 }, role = "matrix", use_muon = false },
         { name = "b", shape = { 10, 4 }, role = "output", use_muon = true },
         { name = "c", shape = { 2, 4, 4 }, role = "matrix" },
      }))
      assert.same({ a = "adamw", b = "muon", c = "adamw" }, r)
   end)

   it("returns copies and leaves the input specs untouched", function()
      local specs = { { name = "w", shape = { 4, 4 }, role = "matrix" } }
      local routed = route(specs)
      assert.is_nil(specs[1].optimizer)
      assert.equal("muon", routed[1].optimizer)
      assert.not_equal(specs[1], routed[1])
   end)
end)

describe("lw.route with custom rules", function()
   local specs = arch.gpt{ n_layer = 2, n_embd = 64, n_head = 2, vocab = 100, seq_len = 16 }

   it("takes the first matching rule, by pattern or predicate, and carries opts", function()
      local rules = {
         { match = "attn%.proj%.weight$", optimizer = "adamw", opts = { lr = 1e-3 } },
         { match = function(s) return #s.shape == 2 and s.role == "matrix" end,
           optimizer = "muon" },
         { match = ".", optimizer = "adamw" },
      }
      local routed = route(specs, rules)
      local r = by_name(routed)
      assert.equal("adamw", r["h.1.attn.proj.weight"])
      assert.equal("muon", r["h.1.attn.qkv.weight"])
      for _, s in ipairs(routed) do
         if s.name == "h.0.attn.proj.weight" then assert.same({ lr = 1e-3 }, s.opts) end
      end
   end)

   it("stops on a parameter that no rule matches, naming it", function()
      assert.has_error(function()
         route(specs, { { match = "^h%.", optimizer = "adamw" } })
      end, "lw.route: no rule matches parameter 'wte.weight' (shape {100, 64}, role embedding)")
      assert.has_error(function()
         route(specs, { { match = "^w", optimizer = "adamw" }, { match = "attn", optimizer = "muon" } })
      end, "lw.route: no rule matches parameter 'h.0.ln_1.weight' (shape {64}, role norm)")
   end)

   it("refuses a shared embedding or a non-matrix on muon", function()
      assert.has_error(function() route(specs, { { match = ".", optimizer = "muon" } }) end,
         "lw.route: rule 1 sends shared embedding 'wte.weight' to muon; a shared embedding is "
         .. "used as embedding and LM head and must use an element-wise rule (adamw)")
      assert.has_error(function()
         route(specs, { { match = "^w", optimizer = "adamw" }, { match = ".", optimizer = "muon" } })
      end, "lw.route: rule 2 sends 'h.0.ln_1.weight' (shape {64}) to muon, which needs a 2-D matrix")
   end)

   it("warns once per rule that routed no parameter, naming it, unless it is optional", function()
      local said = {}
      local function warn(text) said[#said + 1] = text end
      route(specs, {
         { match = "experts", optimizer = "muon", name = "experts" },
         { match = "qkv%.weight$", optimizer = "muon" },
         { match = "ln_", optimizer = "adamw" },
         { match = "router", optimizer = "adamw", optional = true },
         { match = ".", optimizer = "adamw" },
      }, { warn = warn })
      assert.same({
         "rule 1 (experts), match 'experts', matched no parameter (optional = true in the rule "
            .. "silences this)",
      }, said)
      said = {}
      route(specs, { { match = "qkv", optimizer = "adamw" }, { match = "qkv%.weight", optimizer =
         "adamw" }, { match = function() return false end, optimizer = "muon" },
         { match = ".", optimizer = "adamw" } }, { warn = warn })
      assert.same({
         "rule 2, match 'qkv%.weight', matched only parameters an earlier rule took (optional = "
            .. "true in the rule silences this)",
         "rule 3, match a function, matched no parameter (optional = true in the rule silences "
            .. "this)",
      }, said)
      assert.same({}, route.unused(specs)) -- the default rules are all optional
      assert.same({ "rule 2, match a function, matched no parameter (optional = true in the rule "
         .. "silences this)" }, route.unused(specs, { { match = ".", optimizer = "adamw" },
         { match = function() return false end, optimizer = "muon" } }))
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "adamw", optional = "yes" } })
      end, "lw.route: rule 1: optional must be true or false, got yes")
   end)

   it("names malformed rules", function()
      assert.has_error(function() route(specs, {}) end, "lw.route: the rule list is empty")
      assert.has_error(function() route(specs, { { match = ".", optimizer = "sgd" } }) end,
         "lw.route: rule 1: optimizer 'sgd' is not an optimizer rule (one of adamw, muon, lion, normuon)")
      assert.has_error(function() route(specs, { { optimizer = "adamw" } }) end,
         "lw.route: rule 1: match must be a Lua pattern or a function, got nil")
      assert.has_error(function() route(specs, { { match = "[", optimizer = "adamw" } }) end,
         "lw.route: rule 1: bad pattern '[': malformed pattern (missing ']')")
      assert.has_error(function() route(specs, { "x" }) end, "lw.route: rule 1 is a string, not a table")
      assert.has_error(function() route("x") end, "lw.route: specs must be a list, got string")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "adamw", opts = { lrr = 1e-3 } } })
      end, "lw.route: rule 1: unknown option 'lrr' in opts (a rule sets lr, weight_decay and its "
         .. "optimizer's option tables: adamw)")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "adamw", opts = { muon = { momentum = 0.9 } } } })
      end, "lw.route: rule 1: unknown option 'muon' in opts (a rule sets lr, weight_decay and its "
         .. "optimizer's option tables: adamw)")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "normuon", opts = { muon = { momentun = 0.9 } } } })
      end, "lw.route: rule 1: unknown option 'muon.momentun'")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "muon", opts = { muon = { nesterov = 1 } } } })
      end, "lw.route: rule 1: muon.nesterov must be true or false, got 1")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "muon", opts = { muon = { lr = 0.1 } } } })
      end, "lw.route: rule 1: opts.muon.lr: a routing rule sets lr in opts itself")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "muon", opts = { muon = { tp_mode = "blockwise" } } } })
      end, "lw.route: rule 1: opts.muon.tp_mode is the whole optimizer's, not a routing rule's: "
         .. "give it to lw.optim.new")
      assert.has_error(function()
         route(specs, { { match = ".", optimizer = "adamw", opts = { lr = "1e-3" } } })
      end, "lw.route: rule 1: opts.lr must be a finite number >= 0, got '1e-3'")
   end)
end)

describe("a recipe's routing rules", function()
   it("warn on stderr, once, about a rule that routes no parameter, and the run trains", function()
      local out, err, status = helpers.sh_apart("cd /tmp && luajit " .. root
         .. "/spec/fixtures/unused_rules.lua --preset tiny --steps 1 --warmup 0 --eval-max 1 "
         .. "--sample 0 --quiet")
      assert.equal(0, status, out .. err)
      assert.equal("warning: routing rule 1 (experts), match 'experts', matched no parameter "
         .. "(optional = true in the rule silences this)\n", err)
   end)
end)
