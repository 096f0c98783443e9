-- nn_helpers.lua: what the lw.nn specs share: a module bound to a one-rank replicated lw.ddp
-- with seeded parameters, a small GPT's forward and backward, seeded inputs, their copies and a
-- dot product, a module's forward and backward against a float64 reference, and the references'
-- projection and cross-entropy.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn

local M = {}

-- Binds module to a one-rank replicated lw.ddp, its parameters seeded (norms around 1); returns
-- the lw.ddp.
function M.bind(module)
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
function M.forward_backward(cfg)
   local c = { n_layer = 3, n_embd = 16, n_head = 2, vocab = 11, seq_len = 7, bias = true }
   for k, v in pairs(cfg) do c[k] = v end
   local m = nn.GPT.new(c)
   local d = M.bind(m)
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

-- n seeded floats in [-0.5, 0.5).
function M.randoms(n, seed)
   local p = ffi.new("float[?]", n)
   for i = 0, n - 1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      p[i] = seed / 2147483648 - 0.5
   end
   return p
end

-- A new float[n] holding the n floats at p: what a module working in place is given, so that
-- the original is kept.
function M.copy(p, n)
   local q = ffi.new("float[?]", n)
   ffi.copy(q, p, 4 * n)
   return q
end

-- sum of y[i] r[i] over n floats.
function M.dot(y, r, n)
   local s = 0
   for i = 0, n - 1 do s = s + y[i] * r[i] end
   return s
end

-- n floats at p (float*) as a Lua list (1-based), in float64.
function M.list(p, n)
   local t = {}
   for i = 0, n - 1 do t[i + 1] = p[i] end
   return t
end

-- A module's forward and backward against a float64 reference: module bound as bind binds it,
-- forward(x) of n rows of width_in against ref(x, params) (Lua lists in float64; params by short
-- name past the module's prefix, each its parameter's values), and backward with dy = r against
-- central differences of the reference's loss sum(ref(x, params) r) in float64, for the input
-- and every parameter. Returns the worst relative errors { y =, dx =, [name] = } (each |got -
-- want| / max(|want|, 1e-2)), and the lw.ddp.
function M.against_reference(module, n, width_in, width_out, ref)
   local d = M.bind(module)
   local nin, nout = n * width_in, n * width_out
   local x, r = M.randoms(nin, 3), M.randoms(nout, 5)
   local xs, rs, params = M.list(x, nin), M.list(r, nout), {}
   for _, s in ipairs(module:parameters()) do
      params[s.name:sub(#module.prefix + 1)] = d:param(s.name):totable()
   end
   local function worst(got, want, count)
      local w = 0
      for i = 1, count do
         w = math.max(w, math.abs(got[i - 1] - want[i]) / math.max(math.abs(want[i]), 1e-2))
      end
      return w
   end
   local out = { y = worst(module:forward(x, n), ref(xs, params), nout) }
   d:zero_grad()
   local dx = ffi.new("float[?]", nin)
   module:backward(x, r, dx, n)
   -- float64 central differences: step 1e-6 truncates at ~1e-12 and rounds at ~1e-10
   local function differences(v)
      local g = {}
      for i = 1, #v do
         local keep = v[i]
         v[i] = keep + 1e-6
         local up = M.dot_list(ref(xs, params), rs)
         v[i] = keep - 1e-6
         local down = M.dot_list(ref(xs, params), rs)
         v[i] = keep
         g[i] = (up - down) / 2e-6
      end
      return g
   end
   out.dx = worst(dx, differences(xs), nin)
   for _, s in ipairs(module:parameters()) do
      local short = s.name:sub(#module.prefix + 1)
      out[short] = worst(d:grad(s.name).data, differences(params[short]), #params[short])
   end
   return out, d
end

-- x @ w^T (+ bias): rows of Lua lists (n_in values each) times w, a flat Lua array of n_out
-- rows of n_in (nn.Linear's layout); bias, when given, n_out values. What the float64 model
-- references compute their projections with.
function M.linear(x, w, bias, n_in, n_out)
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

-- The mean cross-entropy of logits (rows of Lua lists, float64) against targets (0-based ids,
-- an int32_t array indexed from 0): what the float64 model references return.
function M.cross_entropy(logits, targets)
   local total = 0
   for r = 1, #logits do
      local row, mx = logits[r], -math.huge
      for v = 1, #row do mx = math.max(mx, row[v]) end
      local z = 0
      for v = 1, #row do z = z + math.exp(row[v] - mx) end
      total = total + (math.log(z) + mx - row[targets[r - 1] + 1])
   end
   return total / #logits
end

-- sum of a[i] b[i] over two Lua lists
function M.dot_list(a, b)
   local s = 0
   for i = 1, #b do s = s + a[i] * b[i] end
   return s
end

return M
