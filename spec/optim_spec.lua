-- optim_spec.lua: the optimizer from Lua on one rank: groups, a step that matches the kernels,
-- schedules, skipping, the QKV split, and option errors.
local lw = require("lwopt")

local function specs()
   return { { name = "w", shape = { 8, 4 }, role = "matrix" },
            { name = "g", shape = { 4 }, role = "norm" },
            { name = "e", shape = { 10, 4 }, role = "embedding" } }
end

local function setup(opts, ddp_opts)
   local d = lw.ddp.new(specs(), lw.comm.self(), ddp_opts)
   for _, name in ipairs({ "w", "g", "e" }) do
      d:param(name):copy(function(i) return 0.1 * math.sin(i) end)
   end
   return d, lw.optim.new(d, opts)
end

local function backward(d, value)
   d:zero_grad()
   for _, name in ipairs({ "e", "g", "w" }) do
      d:grad(name):copy(function(i) return value * math.cos(i) end)
      d:grad_ready(name)
   end
end

describe("lw.optim.new", function()
   it("groups parameters by optimizer, lr and weight decay", function()
      local _, opt = setup({ lr = 0.01, muon = { lr = 0.02 } })
      assert.equal(2, #opt.groups)
      local by = {}
      for _, g in ipairs(opt.groups) do
         for _, name in ipairs(g.params) do by[name] = g end
      end
      assert.same({ "muon", 0.02, 0.1 }, { by.w.optimizer, by.w.lr, by.w.weight_decay })
      assert.same({ "adamw", 0.01, 0 }, { by.g.optimizer, by.g.lr, by.g.weight_decay })
      assert.equal(by.g, by.e) -- a norm gain and an embedding: neither decays
   end)

   it("names the library's optimizer rules in lw.optim.kinds", function()
      local names = {}
      for i, k in ipairs(lw.optim.kinds) do names[i] = k.name end
      assert.same({ "adamw", "muon", "lion", "normuon" }, names)
      assert.same({ name = "muon", value = 1, whole = true, parts = { "m" }, lines = {} },
         lw.optim.kinds.muon)
      -- NorMuon's v: one float per row or column of the matrix, not per element
      assert.same({ parts = { "m", "v" }, lines = { v = true } },
         { parts = lw.optim.kinds.normuon.parts, lines = lw.optim.kinds.normuon.lines })
      assert.same({ "m", "v" }, lw.optim.kinds.adamw.parts)
      assert.is_false(lw.optim.kinds.lion.whole)
   end)

   it("steps Lion on the parameters routed to it, with its own betas, lr and weight decay",
      function()
      local routed = lw.route(specs(), { { match = "^w$", optimizer = "muon" },
         { match = "^g$", optimizer = "lion", opts = { lr = 0.01, weight_decay = 0.5 } },
         { match = ".", optimizer = "adamw" } })
      local d = lw.ddp.new(routed, lw.comm.self())
      d:param("g"):copy(function(i) return 0.1 * math.sin(i) end)
      local opt = lw.optim.new(d, { lion = { beta1 = 0.5, beta2 = 0.9 } })
      local w0 = d:param("g"):totable()
      backward(d, 2)
      opt:step()
      -- first step, m = 0: c = (1 - beta1) g, w -= lr (sign(c) + wd w), m = (1 - beta2) g
      local w = d:param("g"):totable()
      for i = 1, 4 do
         local c = 0.5 * 2 * math.cos(i)
         local sign = c > 0 and 1 or (c < 0 and -1 or 0)
         assert.near(w0[i] - 0.01 * (sign + 0.5 * w0[i]), w[i], 1e-7)
      end
      assert.equal(4 * 4, opt:state_bytes() - 4 * 32 - 2 * 4 * 40) -- Lion keeps one part
      assert.has_error(function() lw.optim.new(d, { lion = { beta1 = 1 } }) end,
         "lw.optim.new: lion: beta1 must be in [0, 1), got 1")
      assert.has_error(function() lw.optim.new(d, { lion = { beta3 = 1 } }) end,
         "lw.optim.new: unknown option 'lion.beta3'")
   end)

   it("passes NorMuon's own options to the library, and counts its state by part", function()
      local routed = lw.route(specs(), { { match = "^w$", optimizer = "normuon" },
         { match = ".", optimizer = "adamw" } })
      local d = lw.ddp.new(routed, lw.comm.self())
      assert.has_error(function() lw.optim.new(d, { normuon = { beta2 = 1.5 } }) end,
         "lw.optim.new: normuon: beta2 must be in [0, 1), got 1.5")
      local opt = lw.optim.new(d, { normuon = { beta2 = 0.95, floor = 1e-8 } })
      local w = d:param("w")
      -- w's m (numel floats) and v (max(rows, cols) floats) beside AdamW's m and v of the rest
      local rest = 0
      for _, s in ipairs(d.specs) do
         if s.name ~= "w" then rest = rest + 2 * d:param(s.name).numel end
      end
      assert.equal(4 * (w.numel + math.max(w.shape[1], w.numel / w.shape[1]) + rest),
         opt:state_bytes())
   end)

   it("takes a routing rule's opts over the defaults", function()
      local routed = lw.route(specs(), {
         { match = "^e$", optimizer = "adamw", opts = { lr = 0.5, weight_decay = 0.2 } },
         { match = "^w$", optimizer = "muon" }, { match = ".", optimizer = "adamw" } })
      local opt = lw.optim.new(lw.ddp.new(routed, lw.comm.self()), {})
      local e
      for _, g in ipairs(opt.groups) do if g.params[1] == "e" then e = g end end
      assert.same({ 0.5, 0.2 }, { e.lr, e.weight_decay })
   end)

   it("gives a routing rule's option tables to its parameters alone", function()
      local two = { { name = "a", shape = { 8, 4 }, role = "matrix" },
                    { name = "b", shape = { 8, 4 }, role = "matrix" },
                    { name = "g", shape = { 4 }, role = "norm" },
                    { name = "h", shape = { 4 }, role = "norm" } }
      local function run(rules, opts)
         local d = lw.ddp.new(lw.route(two, rules), lw.comm.self())
         for _, name in ipairs({ "a", "b", "g", "h" }) do
            d:param(name):copy(function(i) return 0.1 * math.sin(i) end)
         end
         local opt = lw.optim.new(d, opts)
         for step = 1, 2 do
            d:zero_grad()
            for _, name in ipairs({ "h", "g", "b", "a" }) do
               d:grad(name):copy(function(i) return step * math.cos(i + #name) end)
               d:grad_ready(name)
            end
            opt:step()
         end
         local out = {}
         for _, name in ipairs({ "a", "b", "g", "h" }) do out[name] = d:param(name):totable() end
         return out, opt
      end
      local top = { lr = 0.1, weight_decay = 0, muon = { coefficients = "identity",
         momentum = 0, nesterov = false, scale = "unit_rms_norm" } }
      local own, opt = run({
         { match = "^a$", optimizer = "muon", opts = { muon = { renormalize = true } } },
         { match = "^g$", optimizer = "adamw", opts = { adamw = { beta2 = 0.5 } } },
         { match = "^b$", optimizer = "muon" }, { match = ".", optimizer = "adamw" } }, top)
      assert.equal(4, #opt.groups) -- a, b: one shape, two groups; g, h likewise
      local renormalized = run({ { match = "^[ab]$", optimizer = "muon" },
         { match = ".", optimizer = "adamw" } },
         { lr = 0.1, weight_decay = 0, muon = { coefficients = "identity", momentum = 0,
           nesterov = false, scale = "unit_rms_norm", renormalize = true },
           adamw = { beta2 = 0.5 } })
      local plain = run({ { match = "^[ab]$", optimizer = "muon" },
         { match = ".", optimizer = "adamw" } }, top)
      assert.same(renormalized.a, own.a)
      assert.same(plain.b, own.b)
      assert.same(renormalized.g, own.g)
      assert.same(plain.h, own.h)
      assert.are_not.same(plain.a, own.a)
      assert.are_not.same(plain.g, own.g)
      -- the nanochat variant for one rule: the top level's keys beside it still win
      local _, mixed = run({
         { match = "^a$", optimizer = "muon", opts = { muon = { variant = "nanochat" } } },
         { match = "^b$", optimizer = "muon" }, { match = ".", optimizer = "adamw" } }, top)
      local a
      for _, g in ipairs(mixed.groups) do if g.params[1] == "a" then a = g end end
      assert.same({ true, "identity", 0 },
         { a.options.muon.cautious_wd, a.options.muon.coefficients, a.options.muon.momentum })
   end)

   it("steps: the result reports the norm, and parameters move", function()
      local d, opt = setup({ lr = 0.01 })
      local before = d:param("w"):totable()
      backward(d, 1)
      local r = opt:step()
      assert.is_true(r.ok)
      assert.is_false(r.skipped)
      assert.equal(1, r.step)
      local expect = 0
      for _, n in ipairs({ 32, 4, 40 }) do
         for i = 1, n do expect = expect + math.cos(i) ^ 2 end
      end
      assert.near(math.sqrt(expect), r.grad_norm, 1e-4)
      assert.is_number(r.time.muon)
      assert.not_same(before, d:param("w"):totable())
   end)

   it("matches the Muon kernel on a matrix (identity orthogonaliser, no momentum)", function()
      local d, opt = setup({ lr = 0.1, weight_decay = 0, muon = { coefficients = "identity",
         momentum = 0, nesterov = false, scale = "unit_rms_norm" } })
      local w0 = d:param("w"):totable()
      backward(d, 2)
      opt:step()
      local w = d:param("w"):totable()
      -- unit_rms_norm scale for 8 x 4 is sqrt(2)
      for i = 1, 32 do assert.near(w0[i] - 0.1 * math.sqrt(2) * 2 * math.cos(i), w[i], 1e-5) end
   end)

   it("scales every group's lr for schedules; lr_scale 0 leaves parameters alone", function()
      local d, opt = setup({ lr = 0.01, weight_decay = 0 })
      local before = d:param("g"):totable()
      backward(d, 1)
      opt:step(0)
      assert.same(before, d:param("g"):totable())
      backward(d, 1)
      opt:step(1)
      assert.not_same(before, d:param("g"):totable())
   end)

   it("skips a step with a non-finite gradient and changes nothing", function()
      local d, opt = setup({ lr = 0.01 })
      local before = d:param("w"):totable()
      backward(d, 1)
      d:grad("g"):set(2, 0 / 0)
      local r = opt:step()
      assert.is_false(r.ok)
      assert.is_true(r.skipped)
      assert.equal(1, r.skips)
      assert.equal(0, r.step)
      assert.same(before, d:param("w"):totable())
   end)

   it("names bad options", function()
      local d = lw.ddp.new(specs(), lw.comm.self())
      local function fails(opts, message)
         assert.has_error(function() lw.optim.new(d, opts) end, message)
      end
      fails({ muon = { momentum = 1 } }, "lw.optim.new: muon: momentum must be in [0, 1), got 1")
      fails({ muon = { ns_steps = 0 } }, "lw.optim.new: muon: ns_steps must be >= 1, got 0")
      fails({ muon = { coefficients = "fast" } }, "lw.optim.new: unknown muon.coefficients "
         .. "'fast' (simple, quintic, polar_express, cubic5, identity, nanochat, or a list of "
         .. "{a, b, c})")
      fails({ muon = { variant = "modded" } }, "lw.optim.new: unknown muon.variant 'modded' "
         .. "(default, nanochat)")
      fails({ muon = { cautious_wd = true, weight_decay_mode = "l2" } }, "lw.optim.new: muon: "
         .. "cautious_wd masks a decay of W at the step, but weight_decay_mode l2 adds the decay "
         .. "to the gradient: use decoupled, independent or scaled")
      fails({ muon = { row_equilibrate = "on" } }, "lw.optim.new: muon.row_equilibrate must be "
         .. "true or false, got 'on'")
      fails({ muon = { coefficients = { { 1, 2 } } } },
         "lw.optim.new: muon.coefficients[1] must be {a, b, c}")
      fails({ lr = -1 }, "lw.optim.new: optimizer: lr must be finite and >= 0, got -1")
      fails({ adamw = { beta1 = 1.5 } }, "lw.optim.new: adamw: beta1 must be in [0, 1), got 1.5")
      fails({ muon = { scale = "big" } }, "lw.optim.new: unknown muon.scale 'big' (spectral, "
         .. "unit_rms_norm, shape_scaling, moonlight)")
      fails({ mode = "legacy" }, "lw.optim.new: mode 'legacy' does not match the buffers, which "
         .. "were made for mode 'layerwise'")
      fails({ momentum = 0.9 }, "lw.optim.new: unknown option 'momentum'")
      fails({ lr = "x" }, "lw.optim.new: lr must be a finite number, got 'x'")
      fails({ clip = 0 / 0 }, "lw.optim.new: clip must be a finite number, got nan")
      fails({ muon = { ns_steps = 2.5 } }, "lw.optim.new: muon.ns_steps must be a finite "
         .. "integer, got 2.5")
      fails({ muon = { nesterov = 1 } }, "lw.optim.new: muon.nesterov must be true or false, got 1")
      fails({ adamw = { eps = "small" } }, "lw.optim.new: adamw.eps must be a finite number, got "
         .. "'small'")
   end)

   it("orthogonalises a fused QKV weight's Q, K and V apart unless split_qkv is off", function()
      -- identity orthogonaliser, no momentum: the step is lr * scale * g, and unit_rms_norm's
      -- scale tells the shapes apart: Q, K, V are 4 x 4 (1), the whole 12 x 4 (sqrt(3))
      local qkv = { { name = "qkv", shape = { 12, 4 }, role = "matrix",
         qkv = { groups = 1, rows = { 4, 4, 4 } }, tp = { dim = 0, blocks = 3 } } }
      for _, split in ipairs({ true, false }) do
         local d = lw.ddp.new(qkv, lw.comm.self())
         d:param("qkv"):copy(function(i) return 0.1 * math.sin(i) end)
         -- a TP group of one rank is no TP: the shard metadata changes nothing
         local opt = lw.optim.new(d, { lr = 0.1, weight_decay = 0, tp_comm = lw.comm.self(),
            muon = { coefficients = "identity", momentum = 0, nesterov = false,
                     scale = "unit_rms_norm", split_qkv = split, tp_mode = "distributed" } })
         d:zero_grad()
         d:grad("qkv"):copy(function(i) return math.cos(i) end)
         d:grad_ready("qkv")
         assert.is_true(opt:step().ok)
         local w, scale = d:param("qkv"):totable(), split and 1 or math.sqrt(3)
         for i = 1, 48 do
            assert.near(0.1 * math.sin(i) - 0.1 * scale * math.cos(i), w[i], 1e-6)
         end
      end
   end)

   it("sets every option of the nanochat variant, under the options given beside it", function()
      local lib = require("lwopt.C").lib
      local c = lw.optim.c_options({ muon = { variant = "nanochat" } }).muon
      assert.same({ 0.95, true, 5, lib.LW_NS_NANOCHAT, true, true, true, lib.LW_WD_SCALED,
         lib.LW_MUON_SCALE_SHAPE_SCALING, 1 },
         { tonumber(string.format("%.2f", c.momentum)), c.nesterov, c.ns_steps,
           tonumber(c.coeffs), c.row_equilibrate, c.renormalize, c.cautious_wd,
           tonumber(c.weight_decay_mode), tonumber(c.scale), c.extra_scale })
      -- the rest as the library's defaults: precision, TP mode, eps, the QKV split
      local d = lib.lw_muon_defaults()
      assert.same({ d.precision, d.tp_mode, d.eps, d.split_qkv },
         { c.precision, c.tp_mode, c.eps, c.split_qkv })
      local given = lw.optim.c_options({ muon = { variant = "nanochat", cautious_wd = false,
         coefficients = "quintic" } }).muon
      assert.same({ false, lib.LW_NS_QUINTIC, true },
         { given.cautious_wd, tonumber(given.coeffs), given.renormalize })
      local default = lw.optim.c_options({ muon = { variant = "default" } }).muon
      assert.same({ false, false, false, lib.LW_NS_QUINTIC, lib.LW_WD_DECOUPLED },
         { default.row_equilibrate, default.renormalize, default.cautious_wd,
           tonumber(default.coeffs), tonumber(default.weight_decay_mode) })
   end)

   it("renormalises Muon's update to sqrt(min(rows, cols)) when asked", function()
      -- identity orthogonaliser, no momentum: the step is lr * scale * sqrt(4) g / ||g||_F
      local d, opt = setup({ lr = 0.1, weight_decay = 0, muon = { coefficients = "identity",
         momentum = 0, nesterov = false, scale = "unit_rms_norm", renormalize = true } })
      local w0 = d:param("w"):totable()
      backward(d, 2)
      opt:step()
      local w, norm = d:param("w"):totable(), 0
      for i = 1, 32 do norm = norm + (2 * math.cos(i)) ^ 2 end
      for i = 1, 32 do
         local x = 2 * 2 * math.cos(i) / math.sqrt(norm)
         assert.near(w0[i] - 0.1 * math.sqrt(2) * x, w[i], 1e-6)
      end
   end)

   it("decays only where the update and the weight agree in sign, with cautious_wd", function()
      local d, opt = setup({ lr = 0.1, weight_decay = 0.5, muon = { coefficients = "identity",
         momentum = 0, nesterov = false, scale = "unit_rms_norm", cautious_wd = true } })
      local w0 = d:param("w"):totable()
      backward(d, 2)
      opt:step()
      local w = d:param("w"):totable()
      for i = 1, 32 do
         local x = 2 * math.cos(i)
         local decay = x * w0[i] >= 0 and 0.1 * 0.5 * w0[i] or 0
         assert.near(w0[i] - (0.1 * math.sqrt(2) * x + decay), w[i], 1e-6)
      end
   end)

   it("names bad tensor-parallel options", function()
      local d = lw.ddp.new(specs(), lw.comm.self())
      assert.has_error(function() lw.optim.new(d, { muon = { tp_mode = "sharded" } }) end,
         "lw.optim.new: unknown muon.tp_mode 'sharded' (duplicated, distributed, blockwise)")
      assert.has_error(function() lw.optim.new(d, { muon = { split_qkv = "yes" } }) end,
         "lw.optim.new: muon.split_qkv must be true or false, got 'yes'")
      assert.has_error(function() lw.optim.new(d, { tp_comm = 2 }) end,
         "lw.optim.new: tp_comm must be a communicator (lw.comm), got number")
   end)

   it("accepts custom coefficients, cycled or repeated", function()
      local d = lw.ddp.new(specs(), lw.comm.self())
      local opt = lw.optim.new(d, { muon = { coefficients = { { 3.4445, -4.7750, 2.0315 },
         { 2, -1.5, 0.5 } }, coefficients_repeat = true } })
      backward(d, 1)
      assert.is_true(opt:step().ok)
   end)
end)
