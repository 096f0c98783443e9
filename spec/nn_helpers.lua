-- nn_helpers.lua: what the lw.nn specs share: a module bound to a one-rank replicated lw.ddp
-- with seeded parameters, a small GPT's forward and backward, seeded inputs and a dot product.
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

-- sum of y[i] r[i] over n floats.
function M.dot(y, r, n)
   local s = 0
   for i = 0, n - 1 do s = s + y[i] * r[i] end
   return s
end

return M
