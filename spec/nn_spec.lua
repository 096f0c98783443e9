-- nn_spec.lua: lw.nn modules: declared parameters equal lw.arch.gpt, a finite-difference check
-- of every module called through the one contract (nn/module.lua), the order of the hooks
-- around parameters and gradients, a tiny GPT's loss and gradients against a slow pure-Lua
-- reference, bf16 weights read as stored against the same run through fp32 views, and the
-- mixture of experts (nn.MoE): its router against a hand-computed example,
-- its gradients (the load-balancing loss's included) against finite differences, an expert
-- without tokens, and a GPT with experts.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn

local function bind(module)
   local d = lw.ddp.new(module:parameters(), lw.comm.self(), { mode = "replicated" })
   module:bind(d, nil)
   local seed = 7
   for _, s in ipairs(module:parameters()) do
      d:param(s.name):copy(function()
         seed = (seed * 1103515245 + 12345) % 2147483648
         return (seed / 2147483648 - 0.5) * 0.6 + (s.role == "norm" and 1 or 0)
      end)
   end
   return d
end

-- A GPT of cfg (defaults: 3 layers of 16, 2 heads, vocabulary 11, 7 positions, biases) bound as
-- bind binds it, one forward and backward over fixed tokens: { loss =, [parameter] = its
-- gradient as a table }, and the activation bytes the forward added.
local function forward_backward(cfg)
   local c = { n_layer = 3, n_embd = 16, n_head = 2, vocab = 11, seq_len = 7, bias = true }
   for k, v in pairs(cfg) do c[k] = v end
   local m = nn.GPT.new(c)
   local d = bind(m)
   local tokens = ffi.new("int32_t[14]")
   for i = 0, 13 do tokens[i] = (i * 3 + 1) % 11 end
   collectgarbage("collect")
   collectgarbage("stop")
   local before = nn.activation_bytes()
   local out = { loss = m:forward(tokens, tokens, 2, 7) }
   local held = nn.activation_bytes() - before
   collectgarbage("restart")
   d:zero_grad()
   m:backward(1)
   for _, s in ipairs(m:parameters()) do out[s.name] = d:grad(s.name):totable() end
   return out, held
end

local function randoms(n, seed)
   local p = ffi.new("float[?]", n)
   for i = 0, n - 1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      p[i] = seed / 2147483648 - 0.5
   end
   return p
end

local function dot(y, r, n)
   local s = 0
   for i = 0, n - 1 do s = s + y[i] * r[i] end
   return s
end

-- Central differences of loss() at a few entries of x (float*) against grad (float*).
local function fd_worst(x, grad, n, loss)
   local worst, step = 0, math.max(1, math.floor(n / 12))
   for i = 0, n - 1, step do
      local keep = x[i]
      x[i] = keep + 1e-2
      local up = loss()
      x[i] = keep - 1e-2
      local down = loss()
      x[i] = keep
      local num, ana = (up - down) / 2e-2, grad[i]
      worst = math.max(worst, math.abs(num - ana) / math.max(1, math.abs(num) + math.abs(ana)))
   end
   return worst
end

describe("lw.nn.GPT", function()
   it("declares the parameters of lw.arch.gpt, in order", function()
      for _, cfg in ipairs({ { n_layer = 2, n_embd = 16, n_head = 2, vocab = 50, seq_len = 8 },
         { n_layer = 1, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, tied = false, bias = true },
         { n_layer = 2, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, n_expert = 3,
           shared_expert = true },
         { n_layer = 1, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, bias = true, n_expert = 4,
           topk = 1, expert_hidden = 12, router_muon = true } }) do
         local mine, theirs = nn.GPT.new(cfg):parameters(), lw.arch.gpt(cfg)
         assert.equal(#theirs, #mine)
         for i, s in ipairs(theirs) do
            assert.same({ s.name, s.shape, s.role, s.shared_embedding, s.expert, s.use_muon },
               { mine[i].name, mine[i].shape, mine[i].role, mine[i].shared_embedding,
                 mine[i].expert, mine[i].use_muon })
         end
      end
   end)
end)

-- The shape arguments of module m's forward and backward for b sequences of t (its contract:
-- nn/module.lua).
local function shape_of(m, b, t)
   if #m.shape_args == 1 then return { b * t } end
   return { b, t }
end

describe("lw.nn modules against finite differences", function()
   -- loss = sum(forward(x) * r); backward with dy = r accumulates dx and parameter gradients.
   -- Every module is called the same way: forward(x, shape...), backward(x, dy, dx, shape...).
   local function check(module, b, t, width_in, width_out)
      local d = bind(module)
      local shape = shape_of(module, b, t)
      local n_in, n_out = b * t * width_in, b * t * width_out
      local x, r = randoms(n_in, 3), randoms(n_out, 5)
      local function loss() return dot(module:forward(x, unpack(shape)), r, n_out) end
      loss()
      local dx = ffi.new("float[?]", n_in)
      d:zero_grad()
      module:backward(x, r, dx, unpack(shape))
      assert.is_true(fd_worst(x, dx, n_in, loss) < 2e-2, "input gradient")
      for _, s in ipairs(module:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         assert.is_true(fd_worst(p.data, g.data, p.numel, loss) < 2e-2, s.name)
      end
   end

   it("Embedding (token + position; the token input has no gradient)", function()
      local m = nn.Embedding.new(7, 4, 3, false)
      local d = bind(m)
      local tokens = ffi.new("int32_t[6]", { 1, 6, 1, 0, 3, 6 })
      local r = randoms(6 * 4, 5)
      local function loss() return dot(m:forward(tokens, 2, 3), r, 6 * 4) end
      loss()
      d:zero_grad()
      m:backward(tokens, r, nil, 2, 3)
      for _, s in ipairs(m:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         assert.is_true(fd_worst(p.data, g.data, p.numel, loss) < 2e-2, s.name)
      end
      assert.equal(0, d:grad("wte.weight"):at(2 * 4 + 1)) -- token 2 never appears
      assert.has_error(function() m:backward(tokens, r, ffi.new("float[24]"), 2, 3) end,
         "nn.Embedding: tokens have no gradient; grad_input must be nil")
   end)

   it("Linear", function() check(nn.Linear.new("l.", 5, 7, true), 1, 3, 5, 7) end)

   it("Linear without bias, and without an input gradient", function()
      local m = nn.Linear.new("l.", 5, 7, false)
      check(m, 1, 3, 5, 7)
      m:backward(randoms(15, 3), randoms(21, 5), nil, 3) -- dx nil: only parameter gradients
   end)

   it("LayerNorm", function() check(nn.LayerNorm.new("ln.", 6, true), 1, 4, 6, 6) end)

   it("GELU", function() check(nn.GELU.new(5), 1, 2, 5, 5) end)

   it("CausalSelfAttention", function()
      check(nn.CausalSelfAttention.new("a.", 8, 2, true), 2, 3, 8, 8)
   end)

   it("MLP", function() check(nn.MLP.new("m.", 4, false), 1, 3, 4, 4) end)

   it("MLP of another hidden size", function() check(nn.MLP.new("m.", 4, true, 6), 1, 3, 4, 4) end)

   it("Block", function() check(nn.Block.new("h.0.", 8, 2, true), 2, 3, 8, 8) end)

   -- tensor parallelism's modules on a one-rank TP group (their all-reduces move nothing; the
   -- multi-rank runs against tp 1 are tests/lua/tp_consistency.lua)
   local function one_rank() return { size = 1, rank = 0, comm = lw.comm.self() } end

   it("ColumnParallelLinear (blocks 3, as the fused QKV weight)", function()
      check(nn.ColumnParallelLinear.new("c.", 5, 9, true, one_rank(), 3), 1, 3, 5, 9)
   end)

   it("RowParallelLinear", function()
      check(nn.RowParallelLinear.new("r.", 6, 4, true, one_rank()), 1, 3, 6, 4)
   end)

   it("VocabParallelEmbedding (token + position)", function()
      local m = nn.VocabParallelEmbedding.new(7, 4, 3, false, one_rank())
      local d = bind(m)
      local tokens = ffi.new("int32_t[6]", { 1, 6, 1, 0, 3, 6 })
      local r = randoms(6 * 4, 5)
      local function loss() return dot(m:forward(tokens, 2, 3), r, 6 * 4) end
      loss()
      d:zero_grad()
      m:backward(tokens, r, nil, 2, 3)
      for _, s in ipairs(m:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         assert.is_true(fd_worst(p.data, g.data, p.numel, loss) < 2e-2, s.name)
      end
      assert.equal(0, d:grad("wte.weight"):at(2 * 4 + 1)) -- token 2 never appears
   end)
end)

describe("lw.nn's module contract", function()
   it("names the shape arguments of every module but GPT's loss API", function()
      for _, name in ipairs({ "Linear", "LayerNorm", "GELU", "MLP", "MoE" }) do
         assert.same({ "n" }, nn[name].shape_args, name)
      end
      for _, name in ipairs({ "Embedding", "CausalSelfAttention", "Block" }) do
         assert.same({ "b", "t" }, nn[name].shape_args, name)
      end
      assert.is_function(nn.activation_bytes)
      assert.is_number(nn.activation_bytes())
      assert.equal(nn.Module, getmetatable(nn.Linear).__index)
   end)

   it("holds a backward's intermediate gradients once per kind of module, not once per layer",
      function()
      -- what a backward adds to the activations held, once the kinds' buffers exist: the same
      -- for 3 layers as for 4
      local function backward_bytes(layers)
         local m = nn.GPT.new{ n_layer = layers, n_embd = 16, n_head = 2, vocab = 11,
            seq_len = 7, bias = true }
         bind(m)
         local tokens = ffi.new("int32_t[14]")
         for i = 0, 13 do tokens[i] = (i * 5 + 2) % 11 end
         collectgarbage("collect")
         collectgarbage("stop")
         m:forward(tokens, tokens, 2, 7)
         local after_forward = nn.activation_bytes()
         m:backward(1)
         local added = nn.activation_bytes() - after_forward
         collectgarbage("restart")
         return added
      end
      backward_bytes(2) -- the kinds' buffers made (unless earlier models made them)
      local three, four = backward_bytes(3), backward_bytes(4)
      assert.equal(three, four) -- the model's own input gradients alone
   end)

   it("recomputes GELU's output in backward when asked: the same loss and gradients, one "
      .. "[n, hidden] activation less a layer", function()
      local kept, held_kept = forward_backward{ recompute_gelu = false }
      local again, held_again = forward_backward{ recompute_gelu = true }
      assert.same(kept, again)
      -- 3 layers of 14 rows x 64 hidden floats not held (one transient for all, maybe made
      -- before)
      assert.is_true(held_kept - held_again >= 2 * 14 * 64 * 4, held_kept .. " " .. held_again)
   end)

   it("counts only the activation buffers it holds: one outgrown again and again is replaced a "
      .. "few times and the old ones freed", function()
      local m = nn.Linear.new("grow.", 4, 4, false)
      collectgarbage("collect")
      local before = nn.activation_bytes()
      local replaced, last = 0, nil
      for n = 1, 2000 do
         local p = m:buffer("rows", n)
         if p ~= last then replaced, last = replaced + 1, p end
      end
      collectgarbage("collect")
      collectgarbage("collect")
      local held = nn.activation_bytes() - before
      assert.is_true(replaced <= 20, tostring(replaced))
      assert.is_true(held >= 4 * 2000 and held <= 4 * 3000, tostring(held))
   end)

   -- hooks that record every call; parameters and gradients in plain arrays
   local function recording_hooks(module)
      local events, store = {}, {}
      for _, s in ipairs(module:parameters()) do
         local numel = 1
         for _, dim in ipairs(s.shape) do numel = numel * dim end
         store[s.name] = { randoms(numel, 11), ffi.new("float[?]", numel) }
      end
      module:bind(nil, {
         acquire = function(name, pass, reuse)
            events[#events + 1] = ("acquire %s %s%s"):format(name, pass, reuse and " reuse" or "")
            return store[name][1], pass == "backward" and store[name][2] or nil
         end,
         release = function(name) events[#events + 1] = "release " .. name end,
         ready = function(name) events[#events + 1] = "ready " .. name end,
      })
      return events
   end

   it("binds every module under a model to its device, those without parameters too", function()
      local m = nn.MLP.new("m.", 4, false)
      local d = bind(m)
      assert.equal(d.device, m.gelu.device)
      assert.equal(d.stream, m.gelu.stream)
   end)

   it("acquires a module's parameters around its kernel and reports gradients after", function()
      local m = nn.Linear.new("l.", 3, 2, true)
      local events = recording_hooks(m)
      local x = randoms(6, 3)
      m:forward(x, 2)
      m:backward(x, randoms(4, 5), ffi.new("float[6]"), 2)
      assert.same({ "acquire l.weight forward", "acquire l.bias forward", "release l.weight",
         "release l.bias", "acquire l.weight backward", "acquire l.bias backward",
         "release l.weight", "release l.bias", "ready l.weight", "ready l.bias" }, events)
   end)

   it("reports each gradient of a GPT once, in backprop order; a tied head is a reuse", function()
      local m = nn.GPT.new{ n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 4 }
      local events = recording_hooks(m)
      local tokens = ffi.new("int32_t[4]", { 1, 2, 3, 4 })
      m:forward(tokens, tokens, 1, 4)
      m:backward(1)
      local ready, wte = {}, {}
      for _, e in ipairs(events) do
         local name = e:match("^ready (%S+)$")
         if name then ready[#ready + 1] = name end
         if e:match("^acquire wte%.weight") then wte[#wte + 1] = e end
      end
      local want = { "ln_f.weight" }
      for i = 1, 0, -1 do
         for _, p in ipairs({ "mlp.proj", "mlp.fc", "ln_2", "attn.proj", "attn.qkv", "ln_1" }) do
            want[#want + 1] = ("h.%d.%s.weight"):format(i, p)
         end
      end
      want[#want + 1] = "wpe.weight"
      want[#want + 1] = "wte.weight"
      assert.same(want, ready)
      assert.same({ "acquire wte.weight forward", "acquire wte.weight forward reuse",
         "acquire wte.weight backward reuse", "acquire wte.weight backward" }, wte)
   end)

   it("gives every expert its turn in the hooks, in backprop order, tokens or not", function()
      local m = nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 4,
         n_expert = 6, topk = 1, shared_expert = true }
      local events = recording_hooks(m)
      local tokens = ffi.new("int32_t[4]", { 1, 2, 3, 4 })
      m:forward(tokens, tokens, 1, 4)
      local counts = m:expert_counts()[1]
      local idle = 0
      for _, count in ipairs(counts) do idle = idle + (count == 0 and 1 or 0) end
      assert.is_true(idle >= 2) -- 4 tokens, 6 experts: some get none
      assert.equal(idle, m.blocks[1].moe.idle)
      m:backward(1)
      local acquired, ready = {}, {}
      for _, e in ipairs(events) do
         local name = e:match("^acquire (h%.0%.moe%.%S+) forward$")
         if name then acquired[#acquired + 1] = name end
         name = e:match("^ready (h%.0%.moe%.%S+)$")
         if name then ready[#ready + 1] = name end
      end
      local want_acquired = { "h.0.moe.router.weight" }
      for e = 0, 5 do
         want_acquired[#want_acquired + 1] = ("h.0.moe.experts.%d.fc.weight"):format(e)
         want_acquired[#want_acquired + 1] = ("h.0.moe.experts.%d.proj.weight"):format(e)
      end
      want_acquired[#want_acquired + 1] = "h.0.moe.shared.fc.weight"
      want_acquired[#want_acquired + 1] = "h.0.moe.shared.proj.weight"
      -- backprop order: the shared expert, the experts from the last (proj before fc), router
      local want_ready = { "h.0.moe.shared.proj.weight", "h.0.moe.shared.fc.weight" }
      for e = 5, 0, -1 do
         want_ready[#want_ready + 1] = ("h.0.moe.experts.%d.proj.weight"):format(e)
         want_ready[#want_ready + 1] = ("h.0.moe.experts.%d.fc.weight"):format(e)
      end
      want_ready[#want_ready + 1] = "h.0.moe.router.weight"
      assert.same(want_acquired, acquired)
      assert.same(want_ready, ready)
   end)
end)

-- ---- a slow reference GPT in plain Lua, double precision ----------------------------------------

local function ref_gpt(P, cfg, tokens, targets, b, t)
   local c, nh, V = cfg.n_embd, cfg.n_head, cfg.vocab
   local hd = c / nh
   local function get(name) return P[name] end
   local function layernorm(x, w, bias)
      local y = {}
      for r = 1, #x do
         local mean, var = 0, 0
         for k = 1, c do mean = mean + x[r][k] end
         mean = mean / c
         for k = 1, c do var = var + (x[r][k] - mean) ^ 2 end
         var = var / c
         y[r] = {}
         for k = 1, c do
            y[r][k] = (x[r][k] - mean) / math.sqrt(var + 1e-5) * w[k] + (bias and bias[k] or 0)
         end
      end
      return y
   end
   local function linear(x, w, bias, n_in, n_out)
      local y = {}
      for r = 1, #x do
         y[r] = {}
         for o = 1, n_out do
            local s = bias and bias[o] or 0
            for i = 1, n_in do s = s + x[r][i] * w[(o - 1) * n_in + i] end
            y[r][o] = s
         end
      end
      return y
   end
   local function gelu(v)
      return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
   end
   local function vec(name, k) return get(name) and function(i) return get(name)[i] end end
   local x = {}
   for r = 1, b * t do
      x[r] = {}
      local tok, pos = tokens[r - 1], (r - 1) % t
      for k = 1, c do x[r][k] = P["wte.weight"][tok * c + k] + P["wpe.weight"][pos * c + k] end
   end
   for l = 0, cfg.n_layer - 1 do
      local p = "h." .. l .. "."
      local a = layernorm(x, P[p .. "ln_1.weight"], P[p .. "ln_1.bias"])
      local qkv = linear(a, P[p .. "attn.qkv.weight"], P[p .. "attn.qkv.bias"], c, 3 * c)
      local y = {}
      for bi = 0, b - 1 do
         for i = 1, t do
            local r = bi * t + i
            y[r] = {}
            for h = 0, nh - 1 do
               local scores, mx = {}, -math.huge
               for j = 1, i do
                  local s = 0
                  for d = 1, hd do s = s + qkv[r][h * hd + d] * qkv[bi * t + j][c + h * hd + d] end
                  scores[j] = s / math.sqrt(hd)
                  mx = math.max(mx, scores[j])
               end
               local z = 0
               for j = 1, i do scores[j] = math.exp(scores[j] - mx); z = z + scores[j] end
               for d = 1, hd do
                  local s = 0
                  for j = 1, i do s = s + scores[j] / z * qkv[bi * t + j][2 * c + h * hd + d] end
                  y[r][h * hd + d] = s
               end
            end
         end
      end
      local o = linear(y, P[p .. "attn.proj.weight"], P[p .. "attn.proj.bias"], c, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + o[r][k] end end
      local m = layernorm(x, P[p .. "ln_2.weight"], P[p .. "ln_2.bias"])
      local f = linear(m, P[p .. "mlp.fc.weight"], P[p .. "mlp.fc.bias"], c, 4 * c)
      for r = 1, #f do for k = 1, 4 * c do f[r][k] = gelu(f[r][k]) end end
      local pr = linear(f, P[p .. "mlp.proj.weight"], P[p .. "mlp.proj.bias"], 4 * c, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + pr[r][k] end end
   end
   local h = layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
   local head = P["lm_head.weight"] or P["wte.weight"]
   local logits = linear(h, head, nil, c, V)
   local total = 0
   for r = 1, #logits do
      local mx = -math.huge
      for v = 1, V do mx = math.max(mx, logits[r][v]) end
      local z = 0
      for v = 1, V do z = z + math.exp(logits[r][v] - mx) end
      total = total + (math.log(z) + mx - logits[r][targets[r - 1] + 1])
   end
   local _ = vec
   return total / #logits
end

describe("lw.nn.GPT against a slow reference", function()
   for _, cfg in ipairs({ { n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5 },
      { n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5, tied = false, bias = true } }) do
      it(("matches loss and gradients (%s, %s)"):format(cfg.tied == false and "untied" or "tied",
         cfg.bias and "bias" or "no bias"), function()
         local model = nn.GPT.new(cfg)
         local d = bind(model)
         local b, t = 2, 5
         local tokens, targets = ffi.new("int32_t[10]"), ffi.new("int32_t[10]")
         for i = 0, 9 do tokens[i] = (i * 7 + 3) % cfg.vocab; targets[i] = (i * 5 + 1) % cfg.vocab end
         -- the reference reads the same parameters as Lua arrays (1-based)
         local function params()
            local P = {}
            for _, s in ipairs(model:parameters()) do P[s.name] = d:param(s.name):totable() end
            return P
         end
         local loss = model:forward(tokens, targets, b, t)
         local ref = ref_gpt(params(), model.cfg, tokens, targets, b, t)
         assert.near(ref, loss, 1e-5)
         d:zero_grad()
         model:backward(1)
         for _, s in ipairs(model:parameters()) do
            local p, g = d:param(s.name), d:grad(s.name)
            local worst, step = 0, math.max(1, math.floor(p.numel / 6))
            for i = 0, p.numel - 1, step do
               local keep = p.data[i]
               p.data[i] = keep + 1e-3
               local up = ref_gpt(params(), model.cfg, tokens, targets, b, t)
               p.data[i] = keep - 1e-3
               local down = ref_gpt(params(), model.cfg, tokens, targets, b, t)
               p.data[i] = keep
               local num = (up - down) / 2e-3
               worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, math.abs(num)))
            end
            assert.is_true(worst < 2e-2, s.name .. " worst " .. worst)
         end
      end)
   end

   it("refuses tokens outside the vocabulary and sequences beyond seq_len", function()
      local model = nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5 }
      bind(model)
      local tokens = ffi.new("int32_t[5]")
      tokens[3] = 11
      assert.has_error(function() model:forward(tokens, nil, 1, 5) end,
         "nn.GPT: token 11 at position 3 is outside [0, 11)")
      assert.has_error(function() model:forward(ffi.new("int32_t[6]"), nil, 1, 6) end,
         "nn.GPT: sequence of 6 exceeds seq_len 5")
   end)
end)

describe("lw.nn with bf16 parameters", function()
   -- The kernels that take a weight's dtype read bf16 parameters as the buffers store them, the
   -- other parameters through fp32 views: a run so gives the losses and gradients of the same
   -- run reading every parameter through fp32 views (hooks without acquire_stored), bit for bit.
   local cfg = { n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5, bias = true }
   local b, t = 2, 5
   local tokens, targets = ffi.new("int32_t[10]"), ffi.new("int32_t[10]")
   for i = 0, 9 do tokens[i] = (i * 7 + 3) % cfg.vocab; targets[i] = (i * 5 + 1) % cfg.vocab end

   local function run(zero, tied, stored, moe)
      local c = {}
      for k, v in pairs(cfg) do c[k] = v end
      c.tied = tied
      for k, v in pairs(moe or {}) do c[k] = v end
      local model = nn.GPT.new(c)
      assert.equal(moe ~= nil, model.blocks[1].moe ~= nil)
      local d = lw.ddp.new(model:parameters(), lw.comm.self(), { bucket_size = 300, zero = zero,
         param_dtype = "bf16" })
      local hooks = d:hooks()
      if not stored then hooks.acquire_stored = nil end
      model:bind(d, hooks)
      local seed = 5
      for _, s in ipairs(model:parameters()) do
         d:write_param(s.name, function()
            seed = (seed * 1103515245 + 12345) % 2147483648
            return (seed / 2147483648 - 0.5) * 0.6 + (s.role == "norm" and 1 or 0)
         end)
      end
      local out = { loss = model:forward(tokens, targets, b, t) }
      -- written between forwards: committed views (a weight read as stored, a norm as fp32)
      for _, name in ipairs({ "h.0.attn.qkv.weight", "h.1.ln_1.weight" }) do
         d:write_param(name, function(i) return 0.01 * (i % 17) - 0.05 end)
      end
      out.again = model:forward(tokens, targets, b, t)
      if zero == 1 then -- gradients whole in the arrays
         d:zero_grad()
         model:backward(1)
         for _, s in ipairs(model:parameters()) do out[s.name] = d:grad(s.name):totable() end
      end
      return out
   end

   for _, zero in ipairs({ 1, 2, 3 }) do
      for _, tied in ipairs({ true, false }) do
         it(("reads the weights as stored, with the results of fp32 views (ZeRO-%d, %s)")
            :format(zero, tied and "tied" or "untied"), function()
            assert.same(run(zero, tied, false), run(zero, tied, true))
         end)
      end
   end

   it("reads a mixture of experts' weights as stored, with the results of fp32 views", function()
      local moe = { n_expert = 3, topk = 2, shared_expert = true }
      assert.same(run(1, true, false, moe), run(1, true, true, moe))
   end)

   it("acquires as stored only what a module's kernels read with their dtype", function()
      local m = nn.GPT.new(cfg)
      local d = lw.ddp.new(m:parameters(), lw.comm.self(), { zero = 1, param_dtype = "bf16" })
      local hooks, how = d:hooks(), {}
      local acquire, acquire_stored = hooks.acquire, hooks.acquire_stored
      hooks.acquire = function(name, ...) how[name] = "fp32"; return acquire(name, ...) end
      hooks.acquire_stored = function(name, ...)
         how[name] = "stored"
         return acquire_stored(name, ...)
      end
      m:bind(d, hooks)
      m:forward(tokens, targets, b, t)
      local want = { ["h.0.attn.qkv.weight"] = "stored", ["h.1.mlp.proj.weight"] = "stored",
         ["wte.weight"] = "stored", ["wpe.weight"] = "stored", ["h.0.ln_1.weight"] = "fp32",
         ["h.0.attn.qkv.bias"] = "fp32", ["ln_f.weight"] = "fp32" }
      local got = {}
      for name in pairs(want) do got[name] = how[name] end
      assert.same(want, got)
   end)
end)

describe("lw.nn with bf16 activations", function()
   -- The activations that feed matrix products, the attention and GELU kept in bf16 (rounded to
   -- nearest even), with their gradients and the logits: a loss within rounding of fp32's,
   -- gradients close, and those activations in half the bytes.
   local function run(activations, cfg)
      local c = { n_layer = 2, activations = activations }
      for k, v in pairs(cfg) do c[k] = v end
      return forward_backward(c)
   end

   -- The bytes bf16 spares in the forward's buffers, 2 a value (rows n = 14, c = 16, 2 layers):
   -- each layer's ln_1 output (n c), QKV's output (3 n c), the attention's (n c), and with a dense
   -- MLP ln_2's (n c), fc's (4 n c) and GELU's (4 n c). Recomputed, GELU's output is a buffer
   -- every model on the device shares, which an earlier run may have made: not counted there.
   local n, c = 14, 16
   local attention = (1 + 3 + 1) * n * c
   local spared = {
      dense = 2 * 2 * (attention + (1 + 4 + 4) * n * c),
      experts = 2 * 2 * attention,
   }
   for _, extra in ipairs({ {}, { recompute_gelu = true }, { n_expert = 3 } }) do
      local what = extra.recompute_gelu and "GELU recomputed" or extra.n_expert and "experts"
         or "dense"
      it("stays within bf16's rounding of the fp32 run (" .. what .. ")", function()
         local fp32, held32 = run("fp32", extra)
         local bf16, held16 = run("bf16", extra)
         assert.is_true(math.abs(bf16.loss - fp32.loss) < 1e-2, bf16.loss .. " " .. fp32.loss)
         assert.is_true(bf16.loss ~= fp32.loss) -- the rounding happened
         for name, g in pairs(fp32) do
            if name ~= "loss" then
               local worst, scale = 0, 1e-3
               for i = 1, #g do
                  worst = math.max(worst, math.abs(bf16[name][i] - g[i]))
                  scale = math.max(scale, math.abs(g[i]))
               end
               assert.is_true(worst <= 0.05 * scale, name .. " " .. worst .. " of " .. scale)
            end
         end
         if spared[what] then
            assert.are.equal(spared[what], held32 - held16)
         else
            assert.is_true(held16 < held32, held16 .. " " .. held32)
         end
      end)
   end

   -- fc with GELU and proj's backward with GELU's are one call each (lw_linear_gelu_forward,
   -- _backward) where the dtypes agree: on the CPU the two kernels' results, bit for bit
   local cases = { { "fp32", {} }, { "bf16", {} }, { "bf16", { recompute_gelu = true } } }
   for _, case in ipairs(cases) do
      local activations, extra = case[1], case[2]
      it(("runs fc and GELU as one call with the two calls' results (%s%s)"):format(activations,
         extra.recompute_gelu and ", GELU recomputed" or ""), function()
         local MLP = require("lwopt.nn.mlp")
         local fused = MLP.fused
         local one = run(activations, extra)
         MLP.fused = function() return false end
         local ok, two = pcall(run, activations, extra)
         MLP.fused = fused
         assert(ok, two)
         for name, g in pairs(one) do
            if name == "loss" then
               assert.are.equal(two.loss, g)
            else
               for i = 1, #g do assert.are.equal(two[name][i], g[i], name) end
            end
         end
      end)
   end

   it("names a dtype it does not keep", function()
      assert.has_error(function() nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 5,
         seq_len = 4, activations = "fp16" } end,
         "nn.GPT: activations must be 'fp32' or 'bf16', got 'fp16'")
   end)
end)

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
      local bytes = nn.activation_bytes()
      favour(2, 3)
      assert.same({ 0, 0, 8, 8 }, m:expert_counts())
      assert.equal(bytes, nn.activation_bytes()) -- experts 2 and 3 took the same rows
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
         n_expert = -1 } end, "nn.GPT: n_expert (-1) must be 0 (dense) or a positive integer")
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
      for _, s in ipairs(model:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         local worst, step = 0, math.max(1, math.floor(p.numel / 5))
         for i = 0, p.numel - 1, step do
            local keep = p.data[i]
            p.data[i] = keep + 1e-3
            local up = objective()
            p.data[i] = keep - 1e-3
            local down = objective()
            p.data[i] = keep
            local num = (up - down) / 2e-3
            worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, math.abs(num)
               + math.abs(g.data[i])))
         end
         assert.is_true(worst < 3e-2, s.name .. " worst " .. worst)
      end
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

describe("lw.nn on a device's memory", function()
   -- Activations live where the model is bound (a GPU's memory on CUDA): a module may move
   -- them only through lw.h's copies on its stream. A host memcpy (ffi.copy) or memset
   -- (ffi.fill) on one crashes on a GPU, and nothing on the CPU would notice, so this reads the
   -- modules' source: no ffi.copy anywhere, and ffi.fill only on GPT's host staging arrays.
   it("moves activations only through the device's copies", function()
      for _, name in ipairs({ "module", "linear", "embedding", "layernorm", "gelu", "attention",
         "mlp", "moe", "block", "gpt" }) do
         local f = assert(io.open("lua/lwopt/nn/" .. name .. ".lua"))
         local text = f:read("*a")
         f:close()
         assert.is_nil(text:find("ffi.copy(", 1, true), name .. ".lua uses ffi.copy")
         for line in text:gmatch("[^\n]*ffi%.fill%([^\n]*") do
            assert.is_truthy(name == "gpt" and line:find("targets", 1, true),
               name .. ".lua fills device memory from the host: " .. line)
         end
      end
   end)
end)
