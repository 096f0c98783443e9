-- nn_gradients_spec.lua: every lw.nn module, called through the one contract (nn/module.lua),
-- against finite differences.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local bind, randoms, dot = h.bind, h.randoms, h.dot

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

   -- An embedding of 7 tokens, width 4, 3 positions, on 2 sequences of 3 tokens: its
   -- parameters' gradients (the token ids have none); returns the tokens and dy.
   local function check_embedding(m)
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
      return tokens, r
   end

   it("Embedding (token + position; the token input has no gradient)", function()
      local m = nn.Embedding.new(7, 4, 3, false)
      local tokens, r = check_embedding(m)
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

   it("RMSNorm, with a gain and without", function()
      check(nn.RMSNorm.new("rn.", 6), 1, 4, 6, 6)
      check(nn.RMSNorm.new("rn.", 6, { gain = false }), 1, 4, 6, 6)
   end)

   it("ReLU2", function() check(nn.ReLU2.new(5), 1, 2, 5, 5) end)

   it("SwiGLU (fused [gate | up] input rows)", function() check(nn.SwiGLU.new(5), 1, 2, 10, 5) end)

   it("CausalSelfAttention", function()
      check(nn.CausalSelfAttention.new("a.", 8, 2, true), 2, 3, 8, 8)
   end)

   it("MLP", function() check(nn.MLP.new("m.", 4, false), 1, 3, 4, 4) end)

   it("MLP of another hidden size", function() check(nn.MLP.new("m.", 4, true, 6), 1, 3, 4, 4) end)

   it("MLP with ReLU^2 and with SwiGLU", function()
      check(nn.MLP.new("m.", 4, true, 6, nil, nil, "relu2"), 1, 3, 4, 4)
      check(nn.MLP.new("m.", 4, false, 6, nil, nil, "swiglu"), 1, 3, 4, 4)
   end)

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
      check_embedding(m)
   end)
end)
