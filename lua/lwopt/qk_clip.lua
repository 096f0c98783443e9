-- qk_clip.lua: a training step's largest attention logits and QK-clip (Kimi K2's MuonClip;
-- docs/algorithms.md section 12) over a model whose attention layers measure them (lw.nn.GPT's
-- set_max_logits): each head's largest logit over the step's micro-steps (their maximum), then
-- over the data-parallel group (the ranks that saw other tokens), each layer's fused QKV weight
-- and bias queued for scaling in the optimizer's next step (lw_optimizer_qk_clip), and each
-- layer's largest logit over its heads and every rank, which the log records (max_logit).
local errors = require("lwopt.errors")

local qk_clip = {}

local Tracker = {}
Tracker.__index = Tracker

-- qk_clip.new(model, tau): a tracker over model (lw.nn.GPT; asked for its maxima from now on);
-- tau nil or false: measure only, else the logit heads are clipped to (> 0).
function qk_clip.new(model, tau)
   if tau and not (type(tau) == "number" and tau > 0 and tau < math.huge) then
      errors.misuse("qk_clip.new", "tau must be a finite number > 0, got %s", tostring(tau))
   end
   model:set_max_logits(true)
   return setmetatable({ model = model, tau = tau or nil, acc = {} }, Tracker)
end

-- A step begins: no maxima yet.
function Tracker:start() self.acc = {} end

-- After each micro-step's forward: its heads' maxima into the step's. A head that was NaN stays
-- so (carried as +inf, which the maximum keeps, until the end).
function Tracker:add()
   local m, nh = self.model:max_logits()
   self.heads = nh
   local acc = self.acc
   for i = 1, #self.model.blocks * nh do
      local x = m[i - 1]
      if x ~= x then x = math.huge end
      acc[i] = math.max(acc[i] or -math.huge, x)
   end
end

-- Before the optimizer's step (collective over dp, and tp when given): the step's maxima
-- reduced over dp (the data-parallel group: the ranks of this TP rank, every rank of an
-- expert-parallel model, whose attention is dense), QK-clip queued in opt when there is a tau.
-- tp: the TP group under tensor parallelism (its ranks hold other heads of the same layers and
-- see the same tokens), nil without. Returns { layers = each layer's largest logit over its
-- heads and every rank (non-finite as NaN), clipped = the heads clipped, every layer's and TP
-- rank's (nil without a tau) }.
function Tracker:finish(opt, dp, tp)
   local nh, acc = self.heads, self.acc
   if nh == nil or #acc == 0 then
      errors.misuse("qk_clip:finish", "no forward was measured this step (call add after each)")
   end
   dp:set_label("the step's largest attention logits")
   local all = dp.size > 1 and dp:allreduce(acc, "max") or acc
   local nan = 0 / 0
   local clipped
   if self.tau then
      clipped = 0
      for l, target in ipairs(self.model:qk_clip_targets()) do
         local heads = {}
         for h = 1, nh do
            local x = all[(l - 1) * nh + h]
            heads[h] = x == math.huge and nan or x
         end
         clipped = clipped + opt:qk_clip(target, heads, self.tau)
      end
   end
   local layers = {}
   for l = 1, #all / nh do
      local top = -math.huge
      for h = 1, nh do top = math.max(top, all[(l - 1) * nh + h]) end
      layers[l] = top
   end
   if tp and tp.size > 1 then
      tp:set_label("the layers' largest attention logits over the TP group")
      layers = tp:allreduce(layers, "max")
      if clipped then clipped = tp:allreduce({ clipped })[1] end
   end
   for l, x in ipairs(layers) do if x == math.huge then layers[l] = nan end end
   return { layers = layers, clipped = clipped }
end

return qk_clip
