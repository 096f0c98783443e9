-- nn_bf16_spec.lua: lw.nn with bf16 parameters (weights read as stored, against the same run
-- through fp32 views) and bf16 activations (within bf16's rounding of fp32, the fused calls
-- against the separate ones).
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local forward_backward = require("nn_helpers").forward_backward

-- The bf16 run's loss within 1e-2 of the fp32 run's and not equal to it (the rounding
-- happened), each gradient within 5% of its largest element (1e-3 at least).
local function tracks(fp32, bf16)
   assert.is_true(math.abs(bf16.loss - fp32.loss) < 1e-2, bf16.loss .. " " .. fp32.loss)
   assert.is_true(bf16.loss ~= fp32.loss)
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
end

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
   -- A run of each dtype first makes the buffers models share (workspaces, a kind's transient
   -- gradients), so that the measured runs count their own whichever specs ran before.
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
         run("fp32", extra)
         run("bf16", extra)
         local fp32, held32 = run("fp32", extra)
         local bf16, held16 = run("bf16", extra)
         tracks(fp32, bf16)
         if spared[what] then
            assert.are.equal(spared[what], held32 - held16)
         else
            assert.is_true(held16 < held32, held16 .. " " .. held32)
         end
      end)
   end

   -- nanochat's parts: the value gate reads the bf16 input and writes bf16 V heads, the
   -- residual scalars, rotary and QK norm run beside it
   it("stays within bf16's rounding of the fp32 run (nanochat's value embeddings and scalars)",
      function()
      local nanochat = { n_kv_head = 1, bias = false, tied = false, norm = "rmsnorm",
         norm_gain = false, position = "rotary", rope_reverse = true, activation = "relu2",
         qk_norm = true, value_embeds = true, ve_gate_channels = 6, resid_scalars = true }
      local fp32 = run("fp32", nanochat)
      local bf16 = run("bf16", nanochat)
      tracks(fp32, bf16)
      assert.is_not_nil(fp32["h.1.attn.ve_gate.weight"])
   end)

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
