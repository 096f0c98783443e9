-- model_check.lua: a whole model against a float64 reference of it: the fixed batch the checks
-- feed, the model's parameters as the references read them, and every parameter's gradient
-- against the reference's central differences; check() puts them together for a model of
-- lw.models against llama_reference.lua (which also has nanochat's parts).
local ffi = require("ffi")
local lw = require("lwopt")
local bind = require("nn_helpers").bind
local assert = require("luassert")
local reference = require("llama_reference")

local M = {}

-- b sequences of t tokens below vocab, and their targets, fixed (int32_t arrays).
function M.batch(b, t, vocab)
   local tokens, targets = ffi.new("int32_t[?]", b * t), ffi.new("int32_t[?]", b * t)
   for i = 0, b * t - 1 do tokens[i] = (i * 7 + 3) % vocab; targets[i] = (i * 5 + 1) % vocab end
   return tokens, targets
end

-- A function returning model's parameters (bound in d) as Lua arrays (1-based) by name, read
-- afresh at each call.
function M.params_of(model, d)
   return function()
      local P = {}
      for _, s in ipairs(model:parameters()) do P[s.name] = d:param(s.name):totable() end
      return P
   end
end

-- Every parameter's gradient in d (after model:backward) against central differences (step
-- 1e-3) of objective(), at `per` elements of each spread over it: the worst relative error
-- |num - grad| / max(|num|, 1e-2) under 2e-2; o.both: relative to |num| + |grad| instead,
-- o.tol: under o.tol instead.
function M.gradients(model, d, objective, per, o)
   o = o or {}
   local tol = o.tol or 2e-2
   for _, s in ipairs(model:parameters()) do
      local p, g = d:param(s.name), d:grad(s.name)
      local worst, step = 0, math.max(1, math.floor(p.numel / per))
      for i = 0, p.numel - 1, step do
         local keep = p.data[i]
         p.data[i] = keep + 1e-3
         local up = objective()
         p.data[i] = keep - 1e-3
         local down = objective()
         p.data[i] = keep
         local num = (up - down) / 2e-3
         local scale = math.abs(num) + (o.both and math.abs(g.data[i]) or 0)
         worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, scale))
      end
      assert.is_true(worst < tol, s.name .. " worst " .. worst)
   end
end

-- Model `name` of cfg from lw.models, bound as nn_helpers.bind binds it (then set(d), if given,
-- may change its parameters), against the reference over fixed tokens: its loss within 1e-5 and
-- every parameter's gradient (at up to five elements of each) against central differences of
-- the reference. ref_cfg: fields the reference reads beyond lw.models.config's (the parts nn.GPT
-- does not have yet). look(model, logits), if given, checks more after the forward, with the
-- reference's logits. Returns the model and its lw.ddp.
function M.check(name, cfg, set, ref_cfg, look)
   local model = lw.models.build(name, cfg)
   local full = lw.models.config(name, cfg)
   for k, v in pairs(ref_cfg or {}) do full[k] = v end
   local d = bind(model)
   if set then set(d) end
   local b, t = 2, 6
   local tokens, targets = M.batch(b, t, 13)
   local params = M.params_of(model, d)
   local loss = model:forward(tokens, targets, b, t)
   local want, _, logits = reference(params(), full, tokens, targets, b, t)
   assert.near(want, loss, 1e-5)
   if look then look(model, logits) end
   d:zero_grad()
   model:backward(1)
   -- the reference's cross-entropy alone (its second result is the experts' load-balancing loss)
   M.gradients(model, d, function()
      return (reference(params(), full, tokens, targets, b, t))
   end, 5)
   return model, d
end

return M
