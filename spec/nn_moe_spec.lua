-- nn_moe_spec.lua: the mixture of experts (nn.MoE): its router against a hand-computed example,
-- its gradients (the load-balancing loss's included) against finite differences, an expert
-- without tokens, its refusals; and a GPT with experts.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local model_check = require("model_check")
local bind, randoms, dot = h.bind, h.randoms, h.dot

describe("lw.nn.MoE", function()
   local lib = require("lwopt.C").lib

   it("routes each token to its top-k experts, ties to the lower index, weights renormalised",
      function()
      -- by hand: row 0 ties logits 1 and 2 at the top, both taken, lower index first, 1/2 each;
      -- row 1: experts 2 and 3, weights e^2 / (e^2 + e) and e / (e^2 + e); row 2 ties three
      -- logits for second place: expert 0
      local logits = ffi.new("float[12]", { 1, 3, 3, 0, 0, -1, 2, 1, 2, 5, 2, 2 })
      local experts, weights = ffi.new("int32_t[6]"), ffi.new("float[6]")
      local probs = ffi.new("float[12]")
      assert.equal(0, lib.lw_moe_router_forward(nil, experts, weights, probs, logits, 3, 4, 2))
      assert.same({ 1, 2, 2, 3, 1, 0 }, { experts[0], experts[1], experts[2], experts[3],
         experts[4], experts[5] })
      local w = 1 / (1 + math.exp(-1))
      assert.near(0.5, weights[0], 1e-7)
      assert.near(0.5, weights[1], 1e-7)
      assert.near(w, weights[2], 1e-6)
      assert.near(1 - w, weights[3], 1e-6)
      assert.near(1 / (1 + math.exp(-3)), weights[4], 1e-6)
      local z = math.exp(1) + 2 * math.exp(3) + 1
      assert.near(math.exp(3) / z, probs[1], 1e-7)
      -- the load-balancing loss of rows 0 and 1: f = (0, 1, 2, 1) / 4, P = column means
      local loss = ffi.new("double[1]")
      assert.equal(0, lib.lw_moe_aux_loss_forward(nil, probs, experts, 2, 4, 2, 0.1, loss))
      local want = 0
      for j, f in ipairs({ 0, 0.25, 0.5, 0.25 }) do
         want = want + f * (probs[j - 1] + probs[4 + j - 1]) / 2
      end
      assert.near(0.1 * 4 * want, loss[0], 1e-7)
   end)

   -- loss = sum(forward(x) * r) + aux_loss; backward with dy = r (aux_scale 1) accumulates the
   -- gradient of both. eps 1e-3: small enough that no token's top-k changes (routing is
   -- piecewise constant), large enough for float32 (errors measured <= 3e-3).
   local function check_moe(m, n, c, r_scale)
      local d = bind(m)
      local x, r = randoms(n * c, 3), randoms(n * c, 5)
      for i = 0, n * c - 1 do r[i] = r[i] * r_scale end
      local function loss() return dot(m:forward(x, n), r, n * c) + m.aux_loss end
      loss()
      local dx = ffi.new("float[?]", n * c)
      d:zero_grad()
      m:backward(x, r, dx, n)
      local function fd(p, g, numel)
         local worst, step = 0, math.max(1, math.floor(numel / 16))
         for i = 0, numel - 1, step do
            local keep = p[i]
            p[i] = keep + 1e-3
            local up = loss()
            p[i] = keep - 1e-3
            local down = loss()
            p[i] = keep
            local num = (up - down) / 2e-3
            worst = math.max(worst, math.abs(num - g[i]) / math.max(1e-2, math.abs(num)
               + math.abs(g[i])))
         end
         return worst
      end
      local worst = fd(x, dx, n * c)
      assert.is_true(worst < 2e-2, "input gradient " .. worst)
      for _, s in ipairs(m:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         worst = fd(p.data, g.data, p.numel)
         assert.is_true(worst < 2e-2, s.name .. " " .. worst)
      end
      return d
   end

   it("matches finite differences: experts, router, load-balancing loss, shared expert", function()
      local m = nn.MoE.new("moe.", 6, { n_expert = 4, topk = 2, aux_coef = 0.5,
         shared_expert = true, bias = true })
      check_moe(m, 10, 6, 1)
      assert.is_true(m.aux_loss > 0)
      local counts = m:expert_counts()
      assert.equal(20, counts[1] + counts[2] + counts[3] + counts[4]) -- 10 tokens x top-2
   end)

   it("matches finite differences with top-1 and a hidden size of its own", function()
      check_moe(nn.MoE.new("moe.", 5, { n_expert = 3, topk = 1, expert_hidden = 7 }), 8, 5, 1)
   end)

   it("moves the router by the load-balancing loss alone (finite differences)", function()
      -- r = 0: the loss is aux_loss only, so the router's whole gradient is the aux loss's
      local m = nn.MoE.new("moe.", 6, { n_expert = 4, topk = 2, aux_coef = 1 })
      local d = check_moe(m, 12, 6, 0)
      local g = d:grad("moe.router.weight")
      local norm = 0
      for i = 0, g.numel - 1 do norm = norm + g.data[i] ^ 2 end
      assert.is_true(norm > 0)
      for _, s in ipairs(m:parameters()) do
         if s.expert then
            local ge = d:grad(s.name)
            for i = 0, ge.numel - 1 do assert.equal(0, ge.data[i]) end
         end
      end
   end)

   it("leaves an expert without tokens an exact zero gradient, and counts it", function()
      local m = nn.MoE.new("moe.", 4, { n_expert = 4, topk = 2, aux_coef = 0.1 })
      local d = bind(m)
      -- token i: 0.1 everywhere and 1.1 in channel i % 3; the router reads channel j for
      -- expert j < 3 and minus their sum for expert 3: each token's top-2 is its channel's
      -- expert and the lower of the other two (tied at 0.1); expert 3 (-1.4) never
      d:param("moe.router.weight"):copy(function(i)
         local j, ch = math.floor((i - 1) / 4), (i - 1) % 4
         if j == 3 then return -1 end
         return ch == j and 1 or 0
      end)
      local n = 6
      local x = ffi.new("float[?]", n * 4)
      for i = 0, n - 1 do
         for ch = 0, 3 do x[i * 4 + ch] = ch == i % 3 and 1.1 or 0.1 end
      end
      m:forward(x, n)
      assert.same({ 6, 4, 2, 0 }, m:expert_counts())
      assert.equal(1, m.idle)
      d:zero_grad()
      m:backward(x, randoms(n * 4, 5), ffi.new("float[?]", n * 4), n)
      for _, name in ipairs({ "moe.experts.3.fc.weight", "moe.experts.3.proj.weight" }) do
         local g = d:grad(name)
         for i = 0, g.numel - 1 do assert.equal(0, g.data[i]) end
      end
      local g, nonzero = d:grad("moe.experts.2.fc.weight"), 0
      for i = 0, g.numel - 1 do nonzero = nonzero + (g.data[i] ~= 0 and 1 or 0) end
      assert.is_true(nonzero > 0)
   end)

   it("keeps n * topk rows of expert activations however the tokens fall", function()
      local m = nn.MoE.new("moe.", 4, { n_expert = 4, topk = 2 })
      local d = bind(m)
      local n = 8
      local x = ffi.new("float[?]", n * 4)
      for i = 0, n * 4 - 1 do x[i] = 1 end
      -- the router reads the sum of x for its favoured pair of experts, minus it for the others
      local function favour(a, b)
         d:param("moe.router.weight"):copy(function(i)
            local j = math.floor((i - 1) / 4)
            return (j == a or j == b) and 1 or -1
         end)
         m:forward(x, n)
         m:backward(x, randoms(n * 4, 5), ffi.new("float[?]", n * 4), n)
      end
      favour(0, 1)
      assert.same({ 8, 8, 0, 0 }, m:expert_counts())
      -- earlier specs' dead modules freed first and none while measuring: the count is this
      -- module's alone
      collectgarbage("collect")
      collectgarbage("stop")
      local bytes = nn.activation_bytes()
      favour(2, 3)
      local after = nn.activation_bytes()
      collectgarbage("restart")
      assert.same({ 0, 0, 8, 8 }, m:expert_counts())
      assert.equal(bytes, after) -- experts 2 and 3 took the same rows
   end)

   it("refuses configurations that cannot route, naming the numbers", function()
      assert.has_error(function() nn.MoE.new("m.", 4, { n_expert = 2, topk = 3 }) end,
         "nn.MoE: topk (3) must be between 1 and n_expert (2)")
      assert.has_error(function() nn.MoE.new("m.", 4, { n_expert = 2, topk = 0 }) end,
         "nn.MoE: topk (0) must be between 1 and n_expert (2)")
      assert.has_error(function() nn.MoE.new("m.", 4, { n_expert = 0 }) end,
         "nn.MoE: n_expert (0) must be a positive integer")
      assert.has_error(function() nn.MoE.new("m.", 4, { n_expert = 2, aux_coef = -1 }) end,
         "nn.MoE: aux_coef (-1) must be a finite number >= 0")
      assert.has_error(function() nn.MoE.new("m.", 4, { n_expert = 2, top_k = 1 }) end,
         "nn.MoE: unknown field 'top_k'")
      assert.has_error(function() nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2,
         n_expert = -1 } end, "nn.GPT: n_expert (-1) must be an integer >= 0")
   end)
end)

describe("lw.nn.GPT with experts", function()
   local cfg = { n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5, n_expert = 4,
      topk = 2, aux_coef = 0.2, shared_expert = true }
   local b, t = 2, 5
   local tokens, targets = ffi.new("int32_t[10]"), ffi.new("int32_t[10]")
   for i = 0, 9 do tokens[i] = (i * 7 + 3) % 11; targets[i] = (i * 5 + 1) % 11 end

   it("returns the cross-entropy; backward is the gradient of it plus the aux loss", function()
      local model = nn.GPT.new(cfg)
      local d = bind(model)
      local loss = model:forward(tokens, targets, b, t)
      assert.is_true(model.aux_loss > 0)
      -- the same parameters without the aux loss: the same returned loss
      local plain_cfg = {}
      for k, v in pairs(cfg) do plain_cfg[k] = v end
      plain_cfg.aux_coef = 0
      local plain = nn.GPT.new(plain_cfg)
      local dp = bind(plain)
      for _, s in ipairs(model:parameters()) do dp:param(s.name):copy(d:param(s.name)) end
      assert.equal(loss, plain:forward(tokens, targets, b, t))
      assert.equal(0, plain.aux_loss)
      -- backward(0.5) against finite differences of 0.5 * (loss + aux_loss)
      model:forward(tokens, targets, b, t)
      d:zero_grad()
      model:backward(0.5)
      local function objective()
         local l = model:forward(tokens, targets, b, t)
         return 0.5 * (l + model.aux_loss)
      end
      model_check.gradients(model, d, objective, 5, { both = true, tol = 3e-2 })
   end)

   it("routes the router to AdamW and the experts to Muon in expert buffers; rules may differ",
      function()
      local specs = nn.GPT.new(cfg):parameters()
      local by = {}
      for _, s in ipairs(lw.route(specs)) do by[s.name] = s end
      assert.equal("adamw", by["h.0.moe.router.weight"].optimizer)
      assert.equal("muon", by["h.0.moe.experts.3.fc.weight"].optimizer)
      assert.equal("muon", by["h.1.moe.shared.proj.weight"].optimizer)
      -- a rule of one's own ahead of the defaults sends the router to Muon
      local rules = { { match = "moe%.router%.weight$", optimizer = "muon" } }
      for _, r in ipairs(lw.route.default_rules) do rules[#rules + 1] = r end
      for _, s in ipairs(lw.route(specs, rules)) do by[s.name] = s end
      assert.equal("muon", by["h.0.moe.router.weight"].optimizer)
      -- the experts, and only they, in expert buffers
      local layout = lw.layout.compute(lw.route(specs), { dp = 2 })
      for _, s in ipairs(specs) do
         local buffer = layout.buffers[layout:place(s.name).buffer]
         assert.equal(s.name:find("%.experts%.") ~= nil, buffer.key.expert, s.name)
      end
   end)

   it("counts the tokens of each expert per layer", function()
      local model = nn.GPT.new(cfg)
      bind(model)
      model:forward(tokens, targets, b, t)
      local counts = model:expert_counts()
      assert.equal(2, #counts)
      for _, layer in ipairs(counts) do
         assert.equal(4, #layer)
         local sum = 0
         for _, c in ipairs(layer) do sum = sum + c end
         assert.equal(b * t * 2, sum)
      end
      assert.same({}, nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2 }:expert_counts())
   end)
end)
