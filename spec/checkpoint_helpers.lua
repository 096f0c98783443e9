-- checkpoint_helpers.lua: what the checkpoint specs share: a small GPT on one rank with fixed
-- parameters, one training step on fixed tokens, and the parameters as Lua tables.
local ffi = require("ffi")
local lw = require("lwopt")

local checkpoint_helpers = {}

-- A 1-layer GPT (16 wide, 2 heads, vocab 32, seq 8) on one rank, its parameters routed by rules
-- (default: lw.route's) and set to fixed values; returns model, ddp, opt.
function checkpoint_helpers.setup(rules)
   local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8 }
   local specs = rules and lw.route(model:parameters(), rules) or model:parameters()
   local ddp = lw.ddp.new(specs, lw.comm.self())
   local opt = lw.optim.new(ddp, { lr = 1e-2 })
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return s.role == "norm" and 1 or 0.1 * math.sin(i + k) end)
   end
   model:bind(ddp, nil)
   return model, ddp, opt
end

-- One step on 2 sequences of 8 fixed tokens.
function checkpoint_helpers.step(model, ddp, opt)
   local tokens, targets = ffi.new("int32_t[16]"), ffi.new("int32_t[16]")
   for i = 0, 15 do tokens[i], targets[i] = (i * 5) % 32, (i * 7 + 1) % 32 end
   ddp:zero_grad()
   model:forward(tokens, targets, 2, 8)
   model:backward(1)
   return opt:step()
end

-- name -> the parameter's values.
function checkpoint_helpers.snapshot(ddp)
   local out = {}
   for _, s in ipairs(ddp.specs) do out[s.name] = ddp:param(s.name):totable() end
   return out
end

return checkpoint_helpers
