-- model_check.lua: a model of lw.models against the float64 model of llama_reference.lua (which
-- also has nanochat's parts): its loss and every parameter's gradient against the reference's
-- central differences.
local ffi = require("ffi")
local lw = require("lwopt")
local bind = require("nn_helpers").bind
local assert = require("luassert")
local reference = require("llama_reference")

local M = {}

-- The reference's cross-entropy alone (its second result is the experts' load-balancing loss).
local function loss_of(P, cfg, tokens, targets, b, t)
   return (reference(P, cfg, tokens, targets, b, t))
end

-- Model `name` of cfg from lw.models, bound as nn_helpers.bind binds it (then set(d), if given,
-- may change its parameters), against the reference over fixed tokens: its loss within 1e-5 and
-- every parameter's gradient (at up to five elements of each) against central differences of
-- the reference. ref_cfg: fields the reference reads beyond lw.models.config's (the parts nn.GPT
-- does not have yet).
function M.check(name, cfg, set, ref_cfg)
   local model = lw.models.build(name, cfg)
   local full = lw.models.config(name, cfg)
   for k, v in pairs(ref_cfg or {}) do full[k] = v end
   local d = bind(model)
   if set then set(d) end
   local b, t = 2, 6
   local tokens, targets = ffi.new("int32_t[12]"), ffi.new("int32_t[12]")
   for i = 0, 11 do tokens[i] = (i * 7 + 3) % 13; targets[i] = (i * 5 + 1) % 13 end
   local function params()
      local P = {}
      for _, s in ipairs(model:parameters()) do P[s.name] = d:param(s.name):totable() end
      return P
   end
   local loss = model:forward(tokens, targets, b, t)
   assert.near(loss_of(params(), full, tokens, targets, b, t), loss, 1e-5)
   d:zero_grad()
   model:backward(1)
   for _, s in ipairs(model:parameters()) do
      local p, g = d:param(s.name), d:grad(s.name)
      local worst, step = 0, math.max(1, math.floor(p.numel / 5))
      for i = 0, p.numel - 1, step do
         local keep = p.data[i]
         p.data[i] = keep + 1e-3
         local up = loss_of(params(), full, tokens, targets, b, t)
         p.data[i] = keep - 1e-3
         local down = loss_of(params(), full, tokens, targets, b, t)
         p.data[i] = keep
         local num = (up - down) / 2e-3
         worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, math.abs(num)))
      end
      assert.is_true(worst < 2e-2, s.name .. " worst " .. worst)
   end
   return model, d
end

return M
