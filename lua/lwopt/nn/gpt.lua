-- nn/gpt.lua: GPT, GPT-2's model: embedding, blocks, final LayerNorm and an LM head (tied to
-- the token embedding, or its own matrix) with the softmax cross-entropy over
-- lw_cross_entropy_forward / _backward. Its top level has a loss API instead of the module
-- contract of nn/module.lua (which says why); everything under it follows the contract.
local ffi = require("ffi")
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local Embedding = require("lwopt.nn.embedding")
local Block = require("lwopt.nn.block")
local LayerNorm = require("lwopt.nn.layernorm")

local lib = C.lib
local zero = base.zero
local check = base.check

local GPT = base.class(base.Module)

local GPT_DEFAULTS = { vocab = 50304, seq_len = 1024, tied = true, bias = false }

-- GPT{ n_layer, n_embd, n_head, vocab, seq_len, tied, bias }: the same parameters, names and
-- order as lw.arch.gpt for the same config.
function GPT.new(cfg)
   local self = setmetatable({}, GPT):init("")
   local o = {}
   for k, v in pairs(GPT_DEFAULTS) do o[k] = v end
   for k, v in pairs(cfg) do o[k] = v end
   assert(o.n_embd % o.n_head == 0, "nn.GPT: n_embd must be divisible by n_head")
   self.cfg = o
   local c = o.n_embd
   self.embedding = self:add(Embedding.new(o.vocab, c, o.seq_len, o.tied))
   self.blocks = {}
   self.block_inputs = {} -- each block's input in the last forward, for its backward
   for i = 0, o.n_layer - 1 do
      self.blocks[i + 1] = self:add(Block.new("h." .. i .. ".", c, o.n_head, o.bias))
   end
   self.ln_f = self:add(LayerNorm.new("ln_f.", c, o.bias))
   if not o.tied then self:declare("lm_head.weight", { o.vocab, c }, "output") end
   -- the LM head's weight, by short name in the module that owns it
   self.head_name = o.tied and "wte.weight" or "lm_head.weight"
   return self
end

local function check_tokens(tokens, n, vocab, what)
   for i = 0, n - 1 do
      local v = tokens[i]
      if v < 0 or v >= vocab then
         error(("nn.GPT: %s %d at position %d is outside [0, %d)"):format(what, v, i, vocab), 0)
      end
   end
end

-- Runs kernel(owner, self, a1, a2) with the LM head's weight reachable in owner.w (owner.g in
-- backward). Tied, the owner is the embedding, read again out of the pass's order: its
-- gradient is complete only after the embedding's own backward, which reports it.
local function with_head(self, pass, kernel, a1, a2)
   if self.cfg.tied then
      return self.embedding:with_params_reused(pass, kernel, self, a1, a2)
   end
   return self:with_params(pass, kernel, self, a1, a2)
end

local loss_cell = ffi.new("double[1]")

local function head_forward(owner, self, n, tg)
   local o, c = self.cfg, self.cfg.n_embd
   local head = owner.w[self.head_name]
   check(lib.lw_cross_entropy_forward(self.stream, self.probs, self.losses, self.h, head, tg, n, c,
      o.vocab, loss_cell))
   return loss_cell[0]
end

local function head_backward(owner, self, dh, loss_scale)
   local o, c = self.cfg, self.cfg.n_embd
   local n = self.b * self.t
   local head_w, head_g = owner.w[self.head_name], owner.g[self.head_name]
   check(lib.lw_cross_entropy_backward(self.stream, dh, head_g, self.probs, self.h, head_w,
      self.targets, n, c, o.vocab, loss_scale or 1))
end

-- Forward over tokens (int32_t* [b*t]); with targets (int32_t*, entries < 0 ignored) returns
-- the mean cross-entropy loss. Probabilities of the next token stay in self.probs [b*t, vocab].
function GPT:forward(tokens, targets, b, t)
   local o = self.cfg
   local n = b * t
   if t > o.seq_len then
      error(("nn.GPT: sequence of %d exceeds seq_len %d"):format(t, o.seq_len), 0)
   end
   check_tokens(tokens, n, o.vocab, "token")
   self.tokens, self.targets, self.b, self.t = tokens, targets, b, t
   local x = self.embedding:forward(tokens, b, t)
   for i, block in ipairs(self.blocks) do
      self.block_inputs[i] = x
      x = block:forward(x, b, t)
   end
   self.x_last = x
   self.h = self.ln_f:forward(x, n)
   self.probs = self:buffer("probs", n * o.vocab)
   self.losses = self:buffer("losses", n)
   local none = self:buffer("no_targets", n)
   local tg = targets or ffi.cast("int32_t *", none)
   if targets == nil then ffi.fill(none, 4 * n, 0xff) end -- all -1: ignored
   -- the LM head's turn comes last in forward; tied, it is the embedding read again
   return with_head(self, "forward", head_forward, n, tg)
end

-- Backward of loss_scale * (the loss of the last forward); accumulates parameter gradients and
-- reports each complete gradient through the hooks, in backprop order.
function GPT:backward(loss_scale)
   local c = self.cfg.n_embd
   local b, t = self.b, self.t
   local n = b * t
   local dh = self:buffer("dh", n * c)
   zero(dh, n * c, self.stream)
   with_head(self, "backward", head_backward, dh, loss_scale)
   local dx = self:buffer("dx", n * c)
   zero(dx, n * c, self.stream)
   self.ln_f:backward(self.x_last, dh, dx, n)
   local dnext = self:buffer("dx2", n * c)
   for i = #self.blocks, 1, -1 do
      zero(dnext, n * c, self.stream)
      self.blocks[i]:backward(self.block_inputs[i], dx, dnext, b, t)
      dx, dnext = dnext, dx
   end
   self.embedding:backward(self.tokens, dx, nil, b, t)
end

-- Next-token probabilities at row `row` (0-based) of the last forward: float* [vocab].
function GPT:next_probs(row) return self.probs + row * self.cfg.vocab end

return GPT
